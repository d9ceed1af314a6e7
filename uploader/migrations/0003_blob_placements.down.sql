DROP TABLE IF EXISTS blob_placements;
