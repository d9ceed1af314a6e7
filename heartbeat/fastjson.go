package heartbeat

import "github.com/mailru/easyjson/jlexer"

// decodeHeartbeatContent parses heartbeat content into heartbeatIn with the
// easyjson lexer (already linked in by go-nostr). Heartbeats are the hot path
// of ingest and encoding/json's reflection costs several microseconds per
// event; this does the same job in about a third of the time. It agrees with
// json.Unmarshal into heartbeatIn on valid JSON (FuzzDecodeHeartbeat checks
// that): null means absent, unknown fields are skipped, later duplicate keys
// win, numbers must be non-negative integers in range. The lexer is laxer
// than JSON (it reads 01, 1. and raw control characters) and keeps
// duplicates: DecodeHeartbeat runs checkContent first, which refuses both.
func decodeHeartbeatContent(data []byte) (heartbeatIn, error) {
	var in heartbeatIn
	l := jlexer.Lexer{Data: data}
	if l.IsNull() { // as encoding/json: null leaves everything absent
		l.Skip()
		l.Consumed()
		return in, l.Error()
	}
	l.Delim('{')
	for !l.IsDelim('}') {
		key := l.UnsafeFieldName(false)
		l.WantColon()
		if l.IsNull() {
			l.Skip()
			switch key {
			case "provider_npub":
				in.ProviderNpub = nil
			case "timestamp":
				in.Timestamp = nil
			case "active_workloads":
				in.ActiveWorkloads = nil
			case "available_capacity":
				in.AvailableCapacity = nil
			case "version":
				in.Version = nil
			case "workloads":
				in.Workloads = nil
			case "shard":
				in.Shard = nil
			case "shards":
				in.Shards = nil
			}
			l.WantComma()
			continue
		}
		switch key {
		case "provider_npub":
			v := l.String()
			in.ProviderNpub = &v
		case "timestamp":
			v := l.Uint64()
			in.Timestamp = &v
		case "active_workloads":
			v := l.Uint32()
			in.ActiveWorkloads = &v
		case "available_capacity":
			c := in.AvailableCapacity
			if c == nil {
				c = &capacityIn{}
			}
			decodeCapacity(&l, c)
			in.AvailableCapacity = c
		case "version":
			v := l.Uint8()
			in.Version = &v
		case "shard":
			v := l.Uint64()
			in.Shard = &v
		case "shards":
			v := l.Uint64()
			in.Shards = &v
		case "workloads":
			var ws []workload1
			l.Delim('[')
			for !l.IsDelim(']') {
				var w workload1
				if l.IsNull() {
					l.Skip()
				} else {
					decodeWorkload(&l, &w)
				}
				ws = append(ws, w)
				l.WantComma()
			}
			l.Delim(']')
			if ws == nil {
				ws = []workload1{}
			}
			in.Workloads = &ws
		default:
			l.SkipRecursive()
		}
		l.WantComma()
	}
	l.Delim('}')
	l.Consumed()
	if err := l.Error(); err != nil {
		return heartbeatIn{}, err
	}
	if errs := l.GetNonFatalErrors(); len(errs) > 0 {
		return heartbeatIn{}, errs[0]
	}
	return in, nil
}

func decodeCapacity(l *jlexer.Lexer, c *capacityIn) {
	l.Delim('{')
	for !l.IsDelim('}') {
		key := l.UnsafeFieldName(false)
		l.WantColon()
		var target **uint64
		switch key {
		case "cpu_available":
			target = &c.CPUAvailable
		case "memory_mb_available":
			target = &c.MemoryMBAvailable
		case "storage_gb_available":
			target = &c.StorageGBAvailable
		}
		switch {
		case target == nil:
			l.SkipRecursive()
		case l.IsNull():
			l.Skip()
			*target = nil
		default:
			v := l.Uint64()
			*target = &v
		}
		l.WantComma()
	}
	l.Delim('}')
}

func decodeWorkload(l *jlexer.Lexer, w *workload1) {
	l.Delim('{')
	for !l.IsDelim('}') {
		key := l.UnsafeFieldName(false)
		l.WantColon()
		switch {
		case key == "ckpt":
			if l.IsNull() {
				l.Skip()
				w.Ckpt = nil
			} else {
				w.Ckpt = &ckptIn{}
				decodeCkpt(l, w.Ckpt)
			}
		case key != "id" && key != "epoch":
			l.SkipRecursive()
		case l.IsNull():
			l.Skip()
			if key == "id" {
				w.ID = nil
			} else {
				w.Epoch = nil
			}
		case key == "id":
			v := l.String()
			w.ID = &v
		default:
			v := l.Uint64()
			w.Epoch = &v
		}
		l.WantComma()
	}
	l.Delim('}')
}

func decodeCkpt(l *jlexer.Lexer, c *ckptIn) {
	l.Delim('{')
	for !l.IsDelim('}') {
		key := l.UnsafeFieldName(false)
		l.WantColon()
		switch {
		case key != "seq" && key != "sha256":
			l.SkipRecursive()
		case l.IsNull():
			l.Skip()
			if key == "seq" {
				c.Seq = nil
			} else {
				c.SHA256 = nil
			}
		case key == "seq":
			v := l.Uint64()
			c.Seq = &v
		default:
			v := l.String()
			c.SHA256 = &v
		}
		l.WantComma()
	}
	l.Delim('}')
}
