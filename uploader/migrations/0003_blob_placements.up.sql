-- Which servers acknowledged which blob of a workload: one row per
-- (workload, blob, server), written for every server that stored a tile
-- and confirmed its sha256, whatever min_replicas made of the tile. A
-- checkpoint counts as published once every one of its blobs is placed on
-- K of the lease's servers (Store.Placed).
CREATE TABLE blob_placements (
	workload  TEXT    NOT NULL CHECK (length(workload) > 0),
	sha256    TEXT    NOT NULL CHECK (length(sha256) = 64),
	server    TEXT    NOT NULL CHECK (length(server) > 0),
	placed_at INTEGER NOT NULL, -- unix milliseconds of the latest acknowledgement
	PRIMARY KEY (workload, sha256, server)
) WITHOUT ROWID;
