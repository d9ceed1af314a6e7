package agent

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/lease"
)

// burstScript writes 30 checkpoints in quick succession at epoch 1 (as
// the contract says, each renamed onto checkpoint), says so in starts
// ("burst 1 <last value>"), then writes no more; at any epoch it first
// says where it started.
func burstScript(starts string) string {
	return `d=$PROVIDER_AGENT_CHECKPOINT_DIR; n=$(cat "$d/checkpoint" 2>/dev/null || echo 0)
echo "$PROVIDER_AGENT_EPOCH $n" >> ` + starts + `
if [ "$PROVIDER_AGENT_EPOCH" = 1 ]; then
  i=0
  while [ $i -lt 30 ]; do
    i=$((i + 1)); n=$((n + 1))
    echo "$n" > "$d/checkpoint.tmp" && mv "$d/checkpoint.tmp" "$d/checkpoint"
    sleep 0.02
  done
  echo "burst $PROVIDER_AGENT_EPOCH $n" >> ` + starts + `
fi
while :; do sleep 1; done`
}

// TestCheckpointBurstThenFailover: a workload writes 30 checkpoints in
// quick succession (faster than the 50 ms poll publishes them), then its
// primary is cut off from two of three relays right after the newest is
// published, and the standby's epoch 2 begins about 9 s later. Paced a
// second apart, the records are never dated ahead of the clock, so none
// is refused as after_successor_start and the standby resumes from the
// newest one, found by its record. (Dated a second after the one before
// at every publish, the 30th record would lie about 25 s ahead.)
func TestCheckpointBurstThenFailover(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	t.Parallel()
	d := startDurableScript(t, "b1", 2, lease.DemoConfig, burstScript)
	var last int
	waitFor(t, 10*time.Second, "the burst written", func() bool {
		n, ok := counterLine(d.starts, "burst %d %d", 1)
		last = n
		return ok
	})
	waitFor(t, 10*time.Second, "the burst's last checkpoint published", func() bool {
		pub, ok := d.primary.a.ckpt.publisher.Last("b1")
		return ok && publishedValue(t, pub, d.key) == last
	})
	newest, _ := d.primary.a.ckpt.publisher.Last("b1")
	published := testutil.ToFloat64(d.primary.a.obs.met.ckptPublished.WithLabelValues("published"))
	if ahead := time.Until(newest.CreatedAt); ahead > time.Second {
		t.Errorf("the newest record (seq %d) is dated %v ahead of the clock, want at most 1s", newest.Seq, ahead.Round(time.Millisecond))
	}
	cut := time.Now()
	for _, p := range d.proxies {
		p.Cut()
	}
	d.standby.waitState("b1", lease.StateLive, 2, 40*time.Second)
	waitFor(t, 10*time.Second, "the workload started at epoch 2", func() bool { _, ok := startsAt(t, d.starts, 2); return ok })
	first, _ := startsAt(t, d.starts, 2)
	t.Logf("30 checkpoints -> %v published (seq up to %d, record dated %v after its file); cut -> epoch 2 started after %v from %d, the newest was %d",
		published, newest.Seq, newest.CreatedAt.Sub(newest.TakenAt).Round(time.Millisecond), time.Since(cut).Round(time.Millisecond), first, last)
	if first != last {
		t.Errorf("epoch 2 started from %d, want the newest published checkpoint %d", first, last)
	}
	for _, r := range RefusalReasons {
		if n := testutil.ToFloat64(d.standby.a.obs.met.ckptRefused.WithLabelValues(r)); n != 0 {
			t.Errorf("the standby refused %v records as %s, want none refused", n, r)
		}
	}
	if published >= 30 {
		t.Errorf("%v checkpoints published for 30 written within a second or two, want them coalesced", published)
	}
	// Restored by its record, not only by the revocation's state_uri.
	ev, ok := d.standby.log.find(func(e Event) bool {
		return e.Kind == "restore" && e.Workload == "b1" && strings.HasPrefix(e.Detail, "checkpoint restored")
	})
	if !ok || !strings.Contains(ev.Detail, fmt.Sprintf("epoch 1 seq %d (record %s", newest.Seq, short(newest.EventID))) {
		t.Errorf("the standby's restore: %q, want it from the newest record (seq %d)", ev.Detail, newest.Seq)
	}
}
