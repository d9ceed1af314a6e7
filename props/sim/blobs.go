package sim

// Blob servers: where a checkpoint's content lives (the agent's Blossom
// servers, K of them, as one store). A checkpoint record and a heartbeat's
// checkpoint mark name a blob by its id (the manifest's hash); a restore
// fetches the value from here, so that relays losing a record loses no
// content, and BlobsDown makes every put and fetch fail (every server
// unreachable) without losing what is stored.

// blob is one stored checkpoint's content and, for checkers, who put it
// and whether it held the epoch Live then (nodes never read those).
type blob struct {
	value    uint64
	author   ProviderID
	workload string
	epoch    uint64
	heldLive bool
}

// BlobsDown makes every blob fetch fail while down (every Blossom server
// unreachable); nothing stored is lost.
func (s *Sim) BlobsDown(down bool) {
	if s.blobsDown == down {
		return
	}
	s.blobsDown = down
	if down {
		s.Logf("every blob server is down")
	} else {
		s.Logf("the blob servers are back")
	}
}

// PutBlob stores a checkpoint's value under id (the author's node, before
// it publishes the record that names it); it reports false, storing
// nothing, while the servers are down.
func (e env) PutBlob(id, workload string, epoch, value uint64) bool {
	if e.s.blobsDown {
		return false
	}
	ep, live := e.p.node.Live(workload)
	e.s.blobs[id] = blob{value: value, author: e.p.id, workload: workload, epoch: epoch, heldLive: live && ep == epoch}
	return true
}

// FetchBlob returns the value stored under id; ok is false while the
// servers are down or when nothing is stored under id.
func (e env) FetchBlob(id string) (value uint64, ok bool) {
	if e.s.blobsDown {
		return 0, false
	}
	b, ok := e.s.blobs[id]
	return b.value, ok
}
