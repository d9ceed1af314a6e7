package sim

import "time"

// Clock maps simulated time to a provider's local wall clock. The clock
// runs DriftPPM fast (negative: slow) from Offset; with a Period, a time
// daemon slews it back every Period, so the drift reverses and the offset
// stays within Offset + DriftPPM*1e-6*Period (a triangle wave; the clock
// never steps and never runs backwards):
//
//	local(t) = Epoch + t + Offset + DriftPPM*1e-6*tri(t)
//
// where tri(t) = t without a Period, else the distance travelled along a
// 0..Period..0 triangle.
type Clock struct {
	Offset   time.Duration
	DriftPPM int64 // |DriftPPM| < 1e6
	Period   time.Duration
}

func (c Clock) tri(t time.Duration) time.Duration {
	if c.Period <= 0 {
		return t
	}
	ph := t % (2 * c.Period)
	if ph < 0 {
		ph += 2 * c.Period
	}
	if ph <= c.Period {
		return ph
	}
	return 2*c.Period - ph
}

// Local is the clock reading at simulated time t.
func (c Clock) Local(t time.Duration) time.Time {
	return Epoch.Add(t + c.Offset + time.Duration(int64(c.tri(t))/1000*c.DriftPPM/1000))
}

// Sim returns a simulated instant at which the clock reads local or just
// after (within a few microseconds; the clock is strictly increasing).
func (c Clock) Sim(local time.Time) time.Duration {
	want := local.Sub(Epoch)
	t := want - c.Offset
	for i := 0; i < 100; i++ {
		diff := c.Local(t).Sub(Epoch) - want
		if diff >= 0 && diff < 5*time.Microsecond {
			return t
		}
		step := time.Duration(float64(diff) * 1e6 / float64(1e6+c.DriftPPM))
		if diff < 0 {
			step -= time.Microsecond // make progress, land at or after
		}
		t -= step
	}
	for c.Local(t).Sub(Epoch) < want {
		t += time.Millisecond
	}
	return t
}

// MaxOffset is the largest |local - true| the clock ever shows.
func (c Clock) MaxOffset() time.Duration {
	o := c.Offset
	if o < 0 {
		o = -o
	}
	d := c.DriftPPM
	if d < 0 {
		d = -d
	}
	if c.Period <= 0 {
		return time.Duration(1<<63 - 1)
	}
	return o + time.Duration(int64(c.Period)/1000*d/1000)
}
