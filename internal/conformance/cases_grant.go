package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/nbd-wtf/go-nostr/nip44"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/imagespec"
	"provideragent/lease"
)

// exampleGrant is the example lease grant's parameters.
func (g *generator) exampleGrant() heartbeat.LeaseGrantParams {
	return heartbeat.LeaseGrantParams{
		WorkloadID: WorkloadID, Primary: g.keys["primary"].Public, Standbys: []string{g.keys["standby"].Public},
		Relays: Relays, Quorum: 2, Replication: lease.ReplicationWarmStandby,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
		Command:       []string{"python3", "-m", "http.server", "8080"},
		At:            time.Unix(GrantCreated, 0),
	}
}

func (g *generator) grantFile() {
	primary, standby, issuer, stranger := g.keys["primary"], g.keys["standby"], g.keys["issuer"], g.keys["stranger"]
	build := func(k Key, change func(p *heartbeat.LeaseGrantParams)) *nostr.Event {
		p := g.exampleGrant()
		if change != nil {
			change(&p)
		}
		return g.resign(g.must(heartbeat.BuildLeaseGrant(k.keys, p)), k)
	}
	grant := build(issuer, nil)
	f := g.newFile("lease-grant.json", heartbeat.KindLeaseGrant, "Lease grant (kind 38388): a trusted issuer names a workload's primary, standbys, relays and what to run")
	g.add(f, vcase{name: "example", example: "lease-grant", ev: grant,
		about: "The NIP's example: the issuer grants web-1 to the primary with the standby as warm standby, over three relays with quorum 2."})
	g.add(f, vcase{name: "image", ev: build(issuer, func(p *heartbeat.LeaseGrantParams) {
		p.Command = nil
		p.Image = &imagespec.Image{Ref: "docker.io/library/nginx:1.27", CPUs: 0.5, MemoryMB: 256, Env: []string{"MODE=prod"}, Network: true}
	}), about: "An OCI image to run (the podman backend) with its limits, and no command: the image's own."})
	g.add(f, vcase{name: "manifest", ev: build(issuer, func(p *heartbeat.LeaseGrantParams) {
		p.Command, p.Manifest = nil, "apiVersion: v1\nkind: Pod\n"
	}), about: "A backend manifest instead of a command."})
	g.add(f, vcase{name: "checkpoint-policy", ev: build(issuer, func(p *heartbeat.LeaseGrantParams) {
		p.Checkpoint = &lease.CheckpointPolicy{Servers: []string{"https://blossom-a.example", "https://blossom-b.example"}, MinServers: 1,
			Restore: lease.RestoreRequired, RestoreTimeout: time.Minute}
	}), about: "A durable workload: where checkpoints go and what a new holder does without one."})
	snpub, _ := identity.NpubOfHex(standby.Public)
	keys := g.checkpointKeys(issuer, primary, standby)
	sealed := build(issuer, func(p *heartbeat.LeaseGrantParams) {
		p.Checkpoint = &lease.CheckpointPolicy{Servers: []string{"https://blossom-a.example"}, Keys: keys}
	})
	g.add(f, vcase{name: "checkpoint-key", ev: sealed,
		about: "A durable workload whose checkpoints are sealed: the grant's checkpoint key (CheckpointKey) sealed to the primary and the standby with NIP-44 v2 by the issuer."})
	toStranger := g.checkpointKeys(issuer, stranger)[stranger.Public]
	g.add(f, vcase{name: "checkpoint-key-to-a-stranger", want: heartbeat.ReasonDecode,
		ev:    g.mutate(sealed, issuer, g.editContent(`"keys":{`, `"keys":{"`+stranger.Public+`":"`+toStranger+`",`)),
		about: "The checkpoint key sealed to a key the lease does not name as well."})
	g.add(f, vcase{name: "checkpoint-key-member-npub", want: heartbeat.ReasonDecode,
		ev:    g.mutate(sealed, issuer, g.editContent(`"keys":{"`+standby.Public, `"keys":{"`+snpub)),
		about: "A member of keys as npub: keys are hex."})
	g.add(f, vcase{name: "expires", ev: build(issuer, func(p *heartbeat.LeaseGrantParams) { p.ExpiresAt = time.Unix(Now+86400, 0) }),
		about: "A lease that expires tomorrow."})
	g.add(f, vcase{name: "expires-at-now", want: heartbeat.ReasonExpired, ev: build(issuer, func(p *heartbeat.LeaseGrantParams) { p.ExpiresAt = time.Unix(Now, 0) }),
		about: "A lease whose expires_at is now."})
	g.add(f, vcase{name: "single-provider", ev: build(issuer, func(p *heartbeat.LeaseGrantParams) {
		p.Standbys, p.Replication, p.RestartPolicy = nil, lease.ReplicationNone, lease.RestartPolicy{Policy: lease.RestartNever}
	}), about: "One provider, no replication, never restarted."})
	pnpub := pnpubOf(primary)
	g.add(f, vcase{name: "keys-as-npub", ev: g.mutate(grant, issuer, func(ev *nostr.Event) {
		ev.Content = g.replace(ev.Content, `"primary":"`+primary.Public, `"primary":"`+pnpub)
		ev.Content = g.replace(ev.Content, `"standbys":["`+standby.Public, `"standbys":["`+snpub)
	}), about: "primary and standbys as npub in the content (p tags stay hex): accepted."})
	g.add(f, vcase{name: "epoch-max", ev: g.mutate(grant, issuer, g.editContent(`"epoch":1`, `"epoch":4611686018427387903`)),
		about: "Epoch 2^62-1, the highest a grant may give (a standby must be able to claim epoch+1)."})
	g.add(f, vcase{name: "untrusted-issuer", want: heartbeat.ReasonWrongSigner, ev: build(stranger, nil),
		about: "The example's lease, signed by a key the receiver does not trust."})
	g.add(f, vcase{name: "signed-by-primary", want: heartbeat.ReasonWrongSigner, ev: build(primary, nil),
		about: "Signed by the primary, which is not a trusted issuer: naming a provider in a lease does not make it an issuer."})
	g.add(f, vcase{name: "names-another-provider", want: heartbeat.ReasonNotNamed, ev: grant, ctx: g.contextWith(func(c *Context) { c.Self = stranger.Public }),
		about: "The example, judged by a provider it names neither as primary nor as standby (context self): a relay that ignores #p on live events delivers it anyway; refused before the signature check."})
	g.add(f, vcase{name: "names-the-receiver", ev: grant, ctx: g.contextWith(func(c *Context) { c.Self = standby.Public }),
		about: "The example, judged by its standby (context self)."})
	g.add(f, vcase{name: "trusted-as-npub", ev: grant, ctx: g.contextWith(func(c *Context) {
		npub, _ := identity.NpubOfHex(issuer.Public)
		c.TrustedIssuers = []string{npub}
	}), about: "The example, with the trusted issuer configured as npub."})
	g.add(f, vcase{name: "quorum-over-relays", want: heartbeat.ReasonDecode, ev: g.mutate(grant, issuer, g.editContent(`"quorum":2`, `"quorum":4`)),
		about: "quorum 4 of 3 relays."})
	g.add(f, vcase{name: "quorum-0", want: heartbeat.ReasonDecode, ev: g.mutate(grant, issuer, g.editContent(`"quorum":2`, `"quorum":0`)), about: "quorum 0."})
	g.add(f, vcase{name: "command-and-manifest", want: heartbeat.ReasonDecode,
		ev: g.mutate(grant, issuer, g.editContent(`"command":[`, `"manifest":"x","command":[`)), about: "Both command and manifest."})
	g.add(f, vcase{name: "nothing-to-run", want: heartbeat.ReasonDecode,
		ev: g.mutate(grant, issuer, g.editContent(`"command":["python3","-m","http.server","8080"],`, "")), about: "No command, image or manifest."})
	g.add(f, vcase{name: "image-marker-in-command", want: heartbeat.ReasonDecode,
		ev: g.mutate(grant, issuer, g.editContent(`"command":["python3"`, `"command":["@image"`)), about: "A command whose first word is @image: images go in the image field."})
	g.add(f, vcase{name: "replication-none-with-standbys", want: heartbeat.ReasonDecode,
		ev: g.mutate(grant, issuer, g.editContent(`"replication":"warm-standby"`, `"replication":"none"`)), about: "Standbys need warm-standby."})
	g.add(f, vcase{name: "warm-standby-without-standbys", want: heartbeat.ReasonDecode, ev: g.mutate(grant, issuer, func(ev *nostr.Event) {
		ev.Content = g.replace(ev.Content, `"standbys":["`+standby.Public+`"]`, `"standbys":[]`)
		g.setTagValue("p", standby.Public, primary.Public)(ev)
	}), about: "warm-standby with no standby."})
	g.add(f, vcase{name: "relays-same-after-normalising", want: heartbeat.ReasonDecode,
		ev:    g.mutate(grant, issuer, g.editContent(`"wss://relay-c.example"`, `"WSS://Relay-A.example:443/"`)),
		about: "Two relay URLs that normalise to one (scheme and host case, default port, trailing slash)."})
	g.add(f, vcase{name: "relay-https", want: heartbeat.ReasonDecode,
		ev: g.mutate(grant, issuer, g.editContent(`"wss://relay-c.example"`, `"https://relay-c.example"`)), about: "A relay URL that is not ws or wss."})
	g.add(f, vcase{name: "epoch-2^62", want: heartbeat.ReasonDecode, ev: g.mutate(grant, issuer, g.editContent(`"epoch":1`, `"epoch":4611686018427387904`)),
		about: "Epoch 2^62: no standby could claim the next one."})
	g.add(f, vcase{name: "restart-policy-always", want: heartbeat.ReasonDecode,
		ev: g.mutate(grant, issuer, g.editContent(`"policy":"on-failure"`, `"policy":"always"`)), about: "A restart policy other than never or on-failure."})
	g.add(f, vcase{name: "primary-nsec", want: heartbeat.ReasonDecode,
		ev:    g.mutate(grant, issuer, g.editContent(`"primary":"`+primary.Public, `"primary":"nsec1`+strings.Repeat("q", 58))),
		about: "An nsec where the primary's public key belongs."})
	g.add(f, vcase{name: "standbys-17", want: heartbeat.ReasonDecode, ev: g.mutate(grant, issuer, func(ev *nostr.Event) {
		list := make([]string, 17)
		for i := range list {
			list[i] = `"` + standby.Public + `"`
		}
		ev.Content = g.replace(ev.Content, `"standbys":["`+standby.Public+`"]`, `"standbys":[`+strings.Join(list, ",")+`]`)
	}), about: "17 standbys, over 16."})
	g.add(f, vcase{name: "p-tag-npub", want: heartbeat.ReasonBadTags, ev: g.mutate(grant, issuer, g.setTagValue("p", standby.Public, snpub)),
		about: "A p tag as npub: tags are hex."})
	g.add(f, vcase{name: "p-tag-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(grant, issuer, func(ev *nostr.Event) {
		ev.Tags = ev.Tags[:len(ev.Tags)-1]
	}), about: "No p tag for the standby: every provider of the lease has one, so it finds its leases by #p."})
	g.add(f, vcase{name: "p-tag-stranger", want: heartbeat.ReasonBadTags, ev: g.mutate(grant, issuer, func(ev *nostr.Event) {
		ev.Tags = append(ev.Tags, nostr.Tag{"p", stranger.Public})
	}), about: "A p tag naming a provider the lease does not name."})
	g.add(f, vcase{name: "d-tag-other-workload", want: heartbeat.ReasonBadTags, ev: g.mutate(grant, issuer, setTag("d", heartbeat.LeaseDTag("web-2"))),
		about: "The d tag names another workload."})
	g.add(f, vcase{name: "workload-tag-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(grant, issuer, setTag("workload")), about: "No workload tag."})
	g.add(f, vcase{name: "restore-timeout-3601", want: heartbeat.ReasonDecode, ev: g.mutate(grant, issuer,
		g.editContent(`"epoch":1}`, `"epoch":1,"checkpoint":{"restore":"required","restore_timeout_s":3601}}`)),
		about: "A checkpoint restore timeout over an hour."})
	g.add(f, vcase{name: "duplicate-primary", want: heartbeat.ReasonDecode,
		ev:    g.mutate(grant, issuer, g.editContent(`"primary":"`+primary.Public+`",`, `"primary":"`+primary.Public+`","primary":"`+standby.Public+`",`)),
		about: "primary given twice: encoding/json would read the second; refused."})
	g.commonCases(f, grant, issuer)
}

func (g *generator) checkpointFile() {
	primary, standby, stranger := g.keys["primary"], g.keys["standby"], g.keys["stranger"]
	record := func() heartbeat.CheckpointRecord {
		return heartbeat.CheckpointRecord{
			WorkloadID: WorkloadID, Epoch: 1, Seq: 3, Manifest: exampleManifest, ManifestSize: 612, Size: 1048576, SHA256: exampleSHA256,
			TakenAt: time.UnixMilli((Created-5)*1000 + 250), Servers: []string{"https://blossom-a.example", "https://blossom-b.example"},
			StateURI: exampleStateURI, GrantAt: time.Unix(GrantCreated, 0),
		}
	}
	build := func(k Key, change func(r *heartbeat.CheckpointRecord)) *nostr.Event {
		r := record()
		if change != nil {
			change(&r)
		}
		return g.resign(g.must(heartbeat.BuildCheckpointRecord(k.keys, r, time.Unix(Created, 0))), k)
	}
	rec := build(primary, nil)
	f := g.newFile("checkpoint.json", heartbeat.KindCheckpoint, "Checkpoint record (kind 38387): where the holder of an epoch placed a checkpoint")
	g.add(f, vcase{name: "example", example: "checkpoint", ev: rec,
		about: "The NIP's example: the primary's fourth checkpoint (seq 3) of epoch 1, on two Blossom servers."})
	g.add(f, vcase{name: "fresh", ev: build(primary, func(r *heartbeat.CheckpointRecord) {
		*r = heartbeat.CheckpointRecord{WorkloadID: WorkloadID, Epoch: 1, Seq: 0, Fresh: true, GrantAt: time.Unix(GrantCreated, 0)}
	}), about: "The base record of a holder that started without state: no checkpoint fields."})
	g.add(f, vcase{name: "final-with-parent", ev: build(standby, func(r *heartbeat.CheckpointRecord) {
		r.Epoch, r.Seq, r.Final, r.Parent = 2, 0, true, strings.Repeat("ab", 32)
	}), about: "A final checkpoint (written after a planned stop) of epoch 2 by the standby, restored from the record named in parent."})
	g.add(f, vcase{name: "stranger", want: heartbeat.ReasonWrongSigner, ev: build(stranger, nil),
		about: "A record by a key the lease does not name: nobody else may offer a state to restore."})
	g.add(f, vcase{name: "finished-workload", want: heartbeat.ReasonUnknownWorkload, ev: rec,
		ctx: g.contextWith(func(c *Context) { c.Workloads[0].Finished = true }), about: "The example, judged after the workload finished."})
	g.add(f, vcase{name: "holder-other-key", want: heartbeat.ReasonWrongSigner,
		ev: g.mutate(rec, primary, g.editContent(`"holder":"`+primary.Public, `"holder":"`+standby.Public)), about: "holder names the standby; the primary signed."})
	g.add(f, vcase{name: "holder-npub", want: heartbeat.ReasonDecode, ev: g.mutate(rec, primary, func(ev *nostr.Event) {
		npub, _ := identity.NpubOfHex(primary.Public)
		ev.Content = g.replace(ev.Content, `"holder":"`+primary.Public, `"holder":"`+npub)
	}), about: "holder as npub: this kind is ours alone and takes lowercase hex only."})
	g.add(f, vcase{name: "x-tag-other", want: heartbeat.ReasonBadTags, ev: g.mutate(rec, primary, setTag("x", exampleSHA256)),
		about: "The x tag is not the manifest's hash."})
	g.add(f, vcase{name: "x-tag-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(rec, primary, setTag("x")), about: "No x tag."})
	g.add(f, vcase{name: "d-tag-other-epoch", want: heartbeat.ReasonBadTags,
		ev: g.mutate(rec, primary, setTag("d", heartbeat.CheckpointDTag(WorkloadID, 2))), about: "The d tag names epoch 2."})
	g.add(f, vcase{name: "t-tag-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(rec, primary, setTag("t")), about: "No t=provider-agent-checkpoint tag."})
	g.add(f, vcase{name: "state-uri-other-manifest", want: heartbeat.ReasonDecode,
		ev:    g.mutate(rec, primary, g.editContent(`"state_uri":"blossom:`+exampleManifest, `"state_uri":"blossom:`+exampleSHA256)),
		about: "state_uri names another blob than the manifest."})
	g.add(f, vcase{name: "taken-after-created", want: heartbeat.ReasonDecode,
		ev:    g.mutate(rec, primary, g.editContent(`"taken_at_ms":`+itoa((Created-5)*1000+250), `"taken_at_ms":`+itoa((Created+1)*1000))),
		about: "taken_at_ms after the event's created_at second."})
	g.add(f, vcase{name: "fresh-with-manifest", want: heartbeat.ReasonDecode,
		ev: g.mutate(rec, primary, g.editContent(`"version":1`, `"fresh":true,"version":1`)), about: "fresh with checkpoint fields."})
	g.add(f, vcase{name: "final-and-fresh", want: heartbeat.ReasonDecode, ev: g.mutate(build(primary, func(r *heartbeat.CheckpointRecord) {
		*r = heartbeat.CheckpointRecord{WorkloadID: WorkloadID, Epoch: 1, Fresh: true, GrantAt: time.Unix(GrantCreated, 0)}
	}), primary, g.editContent(`"fresh":true`, `"final":true,"fresh":true`)), about: "final and fresh both set."})
	g.add(f, vcase{name: "seq-2^62", want: heartbeat.ReasonDecode, ev: g.mutate(rec, primary, g.editContent(`"seq":3`, `"seq":4611686018427387904`)),
		about: "seq 2^62."})
	g.add(f, vcase{name: "epoch-0", want: heartbeat.ReasonDecode, ev: g.mutate(rec, primary, func(ev *nostr.Event) {
		ev.Content = g.replace(ev.Content, `"epoch":1`, `"epoch":0`)
		setTag("d", heartbeat.CheckpointDTag(WorkloadID, 0))(ev)
	}), about: "Epoch 0."})
	g.add(f, vcase{name: "version-missing", want: heartbeat.ReasonDecode, ev: g.mutate(rec, primary, g.editContent(`,"version":1`, "")),
		about: "No version: required in this kind (ours), unlike Paygress's."})
	g.add(f, vcase{name: "server-ftp", want: heartbeat.ReasonDecode,
		ev: g.mutate(rec, primary, g.editContent(`"https://blossom-b.example"`, `"ftp://blossom-b.example"`)), about: "A server that is not an http(s) base URL."})
	g.add(f, vcase{name: "servers-missing", want: heartbeat.ReasonDecode, ev: g.mutate(rec, primary, func(ev *nostr.Event) {
		ev.Content = g.replace(ev.Content, `"servers":["https://blossom-a.example","https://blossom-b.example"],`, "")
	}), about: "No servers."})
	g.add(f, vcase{name: "parent-not-an-id", want: heartbeat.ReasonDecode, ev: g.mutate(rec, primary, g.editContent(`"version":1`, `"parent":"abc","version":1`)),
		about: "parent is not an event id."})
	g.add(f, vcase{name: "content-8192-bytes", ev: g.mutate(rec, primary, padContent(heartbeat.MaxCheckpointContentBytes)),
		about: "Content of exactly 8,192 bytes, the kind's own limit."})
	g.add(f, vcase{name: "content-8193-bytes", want: heartbeat.ReasonTooLarge, ev: g.mutate(rec, primary, padContent(heartbeat.MaxCheckpointContentBytes+1)),
		about: "Content over 8,192 bytes."})
	g.add(f, vcase{name: "duplicate-seq", want: heartbeat.ReasonDecode, ev: g.mutate(rec, primary, g.editContent(`"seq":3`, `"seq":3,"seq":4`)),
		about: "seq given twice."})
	g.commonCases(f, rec, primary)
}

// CheckpointKey is the checkpoint key of the vectors' sealed grants
// (sha256 of "provider-agent conformance checkpoint key"); like the fixed
// keys, it is public.
var CheckpointKey = sha256.Sum256([]byte("provider-agent conformance checkpoint key"))

// checkpointKeys seals CheckpointKey to members from issuer with NIP-44
// v2, with a fixed nonce so the vectors do not change.
func (g *generator) checkpointKeys(issuer Key, members ...Key) map[string]string {
	out := map[string]string{}
	nonce := sha256.Sum256([]byte("provider-agent conformance nip44 nonce"))
	for _, m := range members {
		ck, err := issuer.keys.ConversationKey(m.Public)
		if err == nil {
			out[m.Public], err = nip44.Encrypt(hex.EncodeToString(CheckpointKey[:]), ck, nip44.WithCustomNonce(nonce[:]))
		}
		if err != nil {
			g.fail("seal the checkpoint key to %s: %v", m.Name, err)
		}
	}
	return out
}

func pnpubOf(k Key) string {
	npub, _ := identity.NpubOfHex(k.Public)
	return npub
}
