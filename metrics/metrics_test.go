package metrics

import (
	"testing"
	"time"

	"github.com/leasegate/leasegate/lockcore"
)

// BenchmarkLockPathCycle is what metrics cost an uncontended acquire+release cycle outside the
// HTTP layer: a grant, a release and two script calls observed (the HTTP layer's share is in
// handlers' BenchmarkAcquireReleaseCycle/metrics).
func BenchmarkLockPathCycle(b *testing.B) {
	m := New(time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		m.ScriptCall("acquire", false, 40*time.Microsecond)
		m.Granted("lock", lockcore.Exclusive, lockcore.GrantNew, 0)
		m.ScriptCall("release", false, 40*time.Microsecond)
		m.HoldReleased("lock", lockcore.Exclusive, 3*time.Millisecond)
	}
}
