package promreg

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestFactoryReportsDuplicate(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "x_total", Help: "x"}
	f, regErr := Factory(reg)
	f.NewCounter(opts)
	if err := regErr(); err != nil {
		t.Fatalf("first registration: %v", err)
	}
	f2, regErr2 := Factory(reg)
	f2.NewCounter(opts)
	f2.NewCounter(prometheus.CounterOpts{Name: "y_total", Help: "y"})
	var are prometheus.AlreadyRegisteredError
	if err := regErr2(); !errors.As(err, &are) {
		t.Fatalf("second registration = %v, want AlreadyRegisteredError", err)
	}
	mfs, _ := reg.Gather()
	if len(mfs) != 1 {
		t.Fatalf("registered families = %d, want 1 (nothing after the first error)", len(mfs))
	}
}

func TestFactoryNil(t *testing.T) {
	f, regErr := Factory(nil)
	f.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"})
	if err := regErr(); err != nil {
		t.Fatal(err)
	}
}
