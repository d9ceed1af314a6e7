// Package promreg declares Prometheus collectors once, with promauto, for
// constructors that report a registration failure as an error instead of
// panicking.
package promreg

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Factory returns a promauto factory that registers every collector it
// creates with reg (nil: none is registered), and a function returning the
// first registration error. After a failure the later collectors are created
// but not registered, as a register loop that returns at its first error
// would leave them.
func Factory(reg prometheus.Registerer) (promauto.Factory, func() error) {
	if reg == nil {
		return promauto.With(nil), func() error { return nil }
	}
	r := &registerer{Registerer: reg}
	return promauto.With(r), func() error { return r.err }
}

// registerer turns promauto's MustRegister into Register, keeping the first
// error.
type registerer struct {
	prometheus.Registerer
	err error
}

func (r *registerer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if r.err != nil {
			return
		}
		r.err = r.Registerer.Register(c)
	}
}
