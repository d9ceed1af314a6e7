package courier

import (
	"context"
	"strings"
	"testing"
)

// TestQueryPlansUseIndexes guards the partial indexes: the hot queries must
// keep spelling states as literals so that SQLite can use them.
func TestQueryPlansUseIndexes(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	tests := []struct {
		query, index string
	}{
		{`SELECT COUNT(*) FROM courier_receipts WHERE state = 'pending'`, "courier_receipts_due"},
		{`SELECT COUNT(*) FROM courier_receipts WHERE state = 'dead'`, "courier_receipts_dead"},
		{`SELECT id FROM courier_receipts WHERE state = 'dead' AND ((id < 0) > (1 < 0) OR ((id < 0) = (1 < 0) AND id > 1)) ORDER BY id < 0, id LIMIT 5`, "courier_receipts_dead"},
		{`SELECT seq FROM courier_receipts WHERE state = 'pending' AND next_attempt_at <= 5 ORDER BY next_attempt_at, seq LIMIT 5`, "courier_receipts_due"},
		{`DELETE FROM courier_receipts WHERE state = 'acknowledged' AND acknowledged_at < 5`, "courier_receipts_acked"},
		{`SELECT MIN(next_attempt_at) FROM courier_receipts WHERE state = 'pending'`, "courier_receipts_due"},
	}
	for _, tt := range tests {
		rows, err := e.db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+tt.query)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var a, b, c int
			var d string
			if err := rows.Scan(&a, &b, &c, &d); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, d)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); !strings.Contains(p, tt.index) {
			t.Errorf("plan(%s) = %s, want it to use %s", tt.query, p, tt.index)
		}
	}
}
