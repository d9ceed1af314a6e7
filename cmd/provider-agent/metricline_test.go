package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// waitMetricLine waits (up to 10 s: gauges are refreshed every second)
// until the /metrics at url has a line that is exactly line.
func waitMetricLine(t *testing.T, url, line string) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, l := range strings.Split(string(body), "\n") {
			if l == line {
				return
			}
		}
		last = string(body)
	}
	t.Errorf("GET %s never had the line %q; last:\n%s", url, line, last)
}
