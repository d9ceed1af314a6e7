package conformance

import (
	"strings"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/identity"
)

// exampleStateURI is the BUD-10 URI of the example checkpoint's manifest,
// which the example revocation and checkpoint record carry.
var exampleStateURI = "blossom:" + exampleManifest + ".json?xs=blossom-a.example"

const (
	exampleManifest = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
	exampleSHA256   = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
)

// contextWith returns ExampleContext changed by change.
func (g *generator) contextWith(change func(c *Context)) *Context {
	c := ExampleContext(g.keys)
	c.Workloads = append([]Workload(nil), c.Workloads...)
	change(&c)
	return &c
}

func (g *generator) revocationFile() {
	primary, standby, stranger := g.keys["primary"], g.keys["standby"], g.keys["stranger"]
	params := heartbeat.RevocationParams{
		WorkloadID: WorkloadID, Standbys: []string{standby.Public}, Successor: standby.Public,
		Reason: "relay quorum lost", At: time.Unix(Created, 0), Epoch: 1, StateURI: exampleStateURI,
		QuorumAt: time.UnixMilli((Created-95)*1000 + 250),
	}
	build := func(k Key, p heartbeat.RevocationParams) *nostr.Event {
		return g.resign(g.must(heartbeat.BuildRevocation(k.keys, p)), k)
	}
	rev := build(primary, params)
	npub, _ := identity.NpubOfHex(standby.Public)
	paygressContent := `{"workload_id":"web-1","primary_provider_npub":"` + primary.Public + `","standby_providers":["` + npub +
		`","not-a-key"],"reason":"lost relay quorum","revoked_at":` + itoa(Created) + `,"version":1}`
	paygress := g.resign(&nostr.Event{Kind: heartbeat.KindRevocation, CreatedAt: Created, Content: paygressContent, Tags: nostr.Tags{
		{"t", "paygress"}, {"t", "paygress-revocation"}, {"d", heartbeat.RevocationDTag(primary.Public, WorkloadID)},
		{"v", "1"}, {"workload", WorkloadID}, {"p", standby.Public},
	}}, primary)

	f := g.newFile("revocation.json", heartbeat.KindRevocation, "Lease revocation (kind 38385): the primary stopped the workload; its successor may claim")
	g.add(f, vcase{name: "example", example: "revocation", ev: rev,
		about: "The NIP's example: the primary, fenced, names the standby as successor of epoch 1."})
	g.add(f, vcase{name: "paygress", ev: paygress,
		about: "Written as Paygress v1 writes it: no epoch (the epoch the signer holds), no successor (the first standby that is a key), standby_providers as the consumer gave them."})
	g.add(f, vcase{name: "successor-none", ev: build(primary, func() heartbeat.RevocationParams { p := params; p.Successor = ""; return p }()),
		about: "successor \"\": the primary saw no standby alive; standbys take over on their own."})
	old := params
	old.At, old.QuorumAt = time.Unix(Now-30*86400, 0), time.Time{}
	g.add(f, vcase{name: "thirty-days-old", ev: build(primary, old),
		about: "Revocations have no age limit at ingest (they are addressable and stay on relays); the lease machine ignores one made before the grant."})
	g.add(f, vcase{name: "reason-text", ev: build(primary, func() heartbeat.RevocationParams {
		p := params
		p.Reason = "quorum lost\t(2 of 3 relays)\n\"été\" \\ <&> \u2028 \u0007 \U0001F50C"
		return p
	}()), about: "A reason with a tab, a newline, quotes, a backslash, non-ASCII, U+2028 and a control character: the id covers NIP-01's escaping of each."})
	g.add(f, vcase{name: "signed-by-standby", want: heartbeat.ReasonWrongSigner, ev: build(standby, heartbeat.RevocationParams{
		WorkloadID: WorkloadID, Standbys: []string{primary.Public}, Successor: primary.Public, Reason: "x", At: time.Unix(Created, 0), Epoch: 1,
	}), about: "A well-formed revocation by the standby, which does not hold the workload: only the current holder may revoke."})
	g.add(f, vcase{name: "after-failover", want: heartbeat.ReasonWrongSigner, ev: rev,
		ctx:   g.contextWith(func(c *Context) { c.Workloads[0].Holder = standby.Public }),
		about: "The example, judged after the standby took the workload over: the former primary no longer revokes it."})
	g.add(f, vcase{name: "unknown-workload", want: heartbeat.ReasonUnknownWorkload, ev: rev,
		ctx: g.contextWith(func(c *Context) { c.Workloads = nil }), about: "The example, judged by a receiver that tracks no workload."})
	g.add(f, vcase{name: "finished-workload", want: heartbeat.ReasonUnknownWorkload, ev: rev,
		ctx: g.contextWith(func(c *Context) { c.Workloads[0].Finished = true }), about: "The example, judged after the workload finished."})
	g.add(f, vcase{name: "primary-other-key", want: heartbeat.ReasonWrongSigner, ev: g.mutate(rev, primary, func(ev *nostr.Event) {
		ev.Content = g.replace(ev.Content, `"primary_provider_npub":"`+primary.Public, `"primary_provider_npub":"`+stranger.Public)
		setTag("d", heartbeat.RevocationDTag(stranger.Public, WorkloadID))(ev)
	}), about: "primary_provider_npub (and the d tag) name a stranger; the primary signed."})
	g.add(f, vcase{name: "workload-tag-other", want: heartbeat.ReasonBadTags, ev: g.mutate(rev, primary, setTag("workload", "web-2")),
		about: "The workload tag names another workload than workload_id."})
	g.add(f, vcase{name: "d-tag-other-workload", want: heartbeat.ReasonBadTags,
		ev: g.mutate(rev, primary, setTag("d", heartbeat.RevocationDTag(primary.Public, "web-2"))), about: "The d tag names another workload."})
	g.add(f, vcase{name: "t-revocation-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(rev, primary, g.setTagValue("t", "paygress-revocation", "paygress-x")),
		about: "No t=paygress-revocation tag."})
	g.add(f, vcase{name: "reason-missing", want: heartbeat.ReasonDecode, ev: g.mutate(rev, primary, g.editContent(`"reason":"relay quorum lost",`, "")),
		about: "No reason: a Paygress v1 field, required."})
	g.add(f, vcase{name: "standby-providers-missing", want: heartbeat.ReasonDecode,
		ev: g.mutate(rev, primary, g.editContent(`"standby_providers":["`+standby.Public+`"],`, "")), about: "No standby_providers."})
	g.add(f, vcase{name: "revoked-at-negative", want: heartbeat.ReasonDecode,
		ev: g.mutate(rev, primary, g.editContent(`"revoked_at":`+itoa(Created), `"revoked_at":-1`)), about: "revoked_at is unsigned."})
	g.add(f, vcase{name: "epoch-0", want: heartbeat.ReasonDecode, ev: g.mutate(rev, primary, g.editContent(`"epoch":1`, `"epoch":0`)), about: "Epoch 0."})
	g.add(f, vcase{name: "successor-not-a-standby", want: heartbeat.ReasonDecode,
		ev:    g.mutate(rev, primary, g.editContent(`"successor":"`+standby.Public, `"successor":"`+stranger.Public)),
		about: "The successor is not among standby_providers."})
	g.add(f, vcase{name: "quorum-at-after-created", want: heartbeat.ReasonDecode,
		ev:    g.mutate(rev, primary, g.editContent(`"quorum_at_ms":`+itoa((Created-95)*1000+250), `"quorum_at_ms":`+itoa((Created+1)*1000))),
		about: "quorum_at_ms after the event's created_at second."})
	g.add(f, vcase{name: "state-uri-1025-bytes", want: heartbeat.ReasonDecode,
		ev:    g.mutate(rev, primary, g.editContent(exampleStateURI, exampleStateURI+strings.Repeat("x", 1025-len(exampleStateURI)))),
		about: "state_uri over 1024 bytes."})
	g.add(f, vcase{name: "duplicate-workload-id", want: heartbeat.ReasonDecode,
		ev:    g.mutate(rev, primary, g.editContent(`"workload_id":"web-1",`, `"workload_id":"web-1","workload_id":"web-2",`)),
		about: "workload_id given twice: Paygress refuses it, encoding/json would read web-2; refused."})
	g.add(f, vcase{name: "duplicate-successor", want: heartbeat.ReasonDecode,
		ev:    g.mutate(rev, primary, g.editContent(`"successor":"`, `"successor":"","successor":"`)),
		about: "successor given twice (none, then the standby): Paygress ignores the field, but two receivers of ours could disagree on who claims; refused."})
	g.commonCases(f, rev, primary)
}

func (g *generator) claimFile() {
	standby, stranger := g.keys["standby"], g.keys["stranger"]
	build := func(k Key, status heartbeat.ClaimStatus) *nostr.Event {
		return g.resign(g.must(heartbeat.BuildPromotion(k.keys, heartbeat.PromotionParams{
			WorkloadID: WorkloadID, At: time.Unix(Created, 0), Epoch: 2, Status: status,
		})), k)
	}
	claim, withdrawn := build(standby, heartbeat.ClaimActive), build(standby, heartbeat.ClaimWithdrawn)
	f := g.newFile("claim.json", heartbeat.KindPromotion, "Promotion claim and withdrawn marker (kind 38386 under provider-agent:claim:v1:<workload_id>)")
	g.add(f, vcase{name: "example", example: "claim", ev: claim, about: "The NIP's example: the standby claims epoch 2."})
	g.add(f, vcase{name: "withdrawn", example: "withdrawn", ev: withdrawn,
		about: "The NIP's example of a withdrawn marker: it replaces the claim (same d tag), which no longer competes."})
	g.add(f, vcase{name: "status-absent", ev: g.mutate(claim, standby, g.editContent(`,"status":"active"`, "")), about: "No status: active."})
	g.add(f, vcase{name: "epoch-missing", want: heartbeat.ReasonDecode, ev: g.mutate(claim, standby, g.editContent(`"epoch":2,`, "")),
		about: "A claim without epoch."})
	g.add(f, vcase{name: "epoch-0", want: heartbeat.ReasonDecode, ev: g.mutate(claim, standby, g.editContent(`"epoch":2`, `"epoch":0`)), about: "Epoch 0."})
	g.add(f, vcase{name: "status-paused", want: heartbeat.ReasonDecode, ev: g.mutate(claim, standby, g.editContent(`"status":"active"`, `"status":"paused"`)),
		about: "A status other than active or withdrawn."})
	g.add(f, vcase{name: "stranger", want: heartbeat.ReasonWrongSigner, ev: build(stranger, heartbeat.ClaimActive),
		about: "A claim by a key the lease does not name: nobody outside the lease can fence it with a higher epoch."})
	g.add(f, vcase{name: "untracked-workload", want: heartbeat.ReasonWrongSigner, ev: claim,
		ctx: g.contextWith(func(c *Context) { c.Workloads = nil }), about: "The example, judged by a receiver that tracks no workload: no lease names its signer."})
	g.add(f, vcase{name: "finished-workload", want: heartbeat.ReasonUnknownWorkload, ev: claim,
		ctx: g.contextWith(func(c *Context) { c.Workloads[0].Finished = true }), about: "The example, judged after the workload finished."})
	g.add(f, vcase{name: "new-primary-other-key", want: heartbeat.ReasonWrongSigner,
		ev: g.mutate(claim, standby, g.editContent(standby.Public, g.keys["primary"].Public)), about: "new_primary_npub names the primary; the standby signed."})
	g.add(f, vcase{name: "workload-tag-other", want: heartbeat.ReasonBadTags, ev: g.mutate(claim, standby, setTag("workload", "web-2")),
		about: "The workload tag names another workload."})
	g.add(f, vcase{name: "d-tag-other-workload", want: heartbeat.ReasonBadTags, ev: g.mutate(claim, standby, setTag("d", heartbeat.ClaimDTag("web-2"))),
		about: "The d tag names another workload."})
	g.add(f, vcase{name: "t-tag-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(claim, standby, setTag("t")), about: "No t=provider-agent-claim tag."})
	g.add(f, vcase{name: "under-announcement-d-tag", want: heartbeat.ReasonBadTags,
		ev:    g.mutate(claim, standby, setTag("d", heartbeat.PromotionDTag(WorkloadID))),
		about: "A claim under paygress:promoted:v1:<id> without Paygress's tags: that d tag is the announcement's, which a Paygress node reads as a finished promotion."})
	g.add(f, vcase{name: "duplicate-status", want: heartbeat.ReasonDecode,
		ev:    g.mutate(withdrawn, standby, g.editContent(`"status":"withdrawn"`, `"status":"withdrawn","status":"active"`)),
		about: "status given twice: one reader would see a withdrawn claim, another an active one."})
	g.commonCases(f, claim, standby)
}

func (g *generator) announcementFile() {
	primary, standby, stranger := g.keys["primary"], g.keys["standby"], g.keys["stranger"]
	ann := g.resign(g.must(heartbeat.BuildAnnouncement(standby.keys, heartbeat.AnnouncementParams{
		WorkloadID: WorkloadID, At: time.Unix(Created, 0), Epoch: 2,
	})), standby)
	paygressContent := `{"workload_id":"web-1","new_primary_npub":"` + standby.Public + `","promoted_at":` + itoa(Created) + `,"version":1}`
	paygress := g.resign(&nostr.Event{Kind: heartbeat.KindPromotion, CreatedAt: Created, Content: paygressContent, Tags: nostr.Tags{
		{"t", "paygress"}, {"t", "paygress-promoted"}, {"d", heartbeat.PromotionDTag(WorkloadID)}, {"v", "1"}, {"workload", WorkloadID},
	}}, standby)
	f := g.newFile("announcement.json", heartbeat.KindPromotion, "Promotion announcement (kind 38386 under paygress:promoted:v1:<workload_id>), Paygress form")
	g.add(f, vcase{name: "example", example: "announcement", ev: ann,
		about: "The NIP's example: the standby won its claim of epoch 2, started the workload and announces it."})
	g.add(f, vcase{name: "paygress", ev: paygress,
		about: "Written as Paygress v1 writes it: no epoch (unknown: the lease machine decides from created_at), no status (active)."})
	g.add(f, vcase{name: "paygress-no-version", ev: g.mutate(paygress, standby, g.editContent(`,"version":1`, "")), about: "Paygress v1 without version."})
	npub, _ := identity.NpubOfHex(standby.Public)
	g.add(f, vcase{name: "new-primary-npub", ev: g.mutate(ann, standby, g.editContent(`"`+standby.Public+`"`, `"`+npub+`"`)),
		about: "new_primary_npub as npub: accepted; write hex, as Paygress matches it as a string."})
	g.add(f, vcase{name: "status-withdrawn", ev: g.mutate(ann, standby, g.editContent(`"epoch":2`, `"epoch":2,"status":"withdrawn"`)),
		about: "status withdrawn under the announcement d tag: the agent reads a withdrawn claim, a Paygress node a promotion (it does not read status). Never write it."})
	g.add(f, vcase{name: "t-promoted-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(ann, standby, g.setTagValue("t", "paygress-promoted", "provider-agent-claim")),
		about: "Under paygress:promoted:v1:<id> without t=paygress-promoted."})
	g.add(f, vcase{name: "t-paygress-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(ann, standby, g.setTagValue("t", "paygress", "other")),
		about: "Without t=paygress."})
	g.add(f, vcase{name: "stranger", want: heartbeat.ReasonWrongSigner, ev: g.resign(g.must(heartbeat.BuildAnnouncement(stranger.keys, heartbeat.AnnouncementParams{
		WorkloadID: WorkloadID, At: time.Unix(Created, 0), Epoch: 2,
	})), stranger), about: "An announcement by a key the lease does not name."})
	g.add(f, vcase{name: "finished-workload", want: heartbeat.ReasonUnknownWorkload, ev: ann,
		ctx: g.contextWith(func(c *Context) { c.Workloads[0].Finished = true }), about: "The example, judged after the workload finished."})
	g.add(f, vcase{name: "by-the-primary", ev: g.resign(g.must(heartbeat.BuildAnnouncement(primary.keys, heartbeat.AnnouncementParams{
		WorkloadID: WorkloadID, At: time.Unix(Created, 0), Epoch: 2,
	})), primary), about: "An announcement by the primary: any member may announce; the lease machine judges the epoch."})
	g.add(f, vcase{name: "workload-tag-other", want: heartbeat.ReasonBadTags, ev: g.mutate(ann, standby, setTag("workload", "web-2")),
		about: "The workload tag names another workload."})
	g.add(f, vcase{name: "d-tag-other-workload", want: heartbeat.ReasonBadTags, ev: g.mutate(ann, standby, setTag("d", heartbeat.PromotionDTag("web-2"))),
		about: "The d tag names another workload."})
	g.add(f, vcase{name: "promoted-at-string", want: heartbeat.ReasonDecode,
		ev: g.mutate(ann, standby, g.editContent(`"promoted_at":`+itoa(Created), `"promoted_at":"`+itoa(Created)+`"`)), about: "promoted_at as a string."})
	g.add(f, vcase{name: "duplicate-workload-id", want: heartbeat.ReasonDecode,
		ev:    g.mutate(ann, standby, g.editContent(`"workload_id":"web-1",`, `"workload_id":"web-1","workload_id":"web-1",`)),
		about: "workload_id given twice, both the same: Paygress refuses it, and so does the agent."})
	g.commonCases(f, ann, standby)
}
