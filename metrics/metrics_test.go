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

// BenchmarkCycleParallel is every metric an uncontended acquire+release cycle records (its two
// requests, two script calls, a grant and a release), from as many goroutines as there are
// cores, as a loaded gateway records them.
func BenchmarkCycleParallel(b *testing.B) {
	m := New(time.Minute)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.ScriptCall("acquire", false, 40*time.Microsecond)
			m.Granted("lock", lockcore.Exclusive, lockcore.GrantNew, 0)
			m.ObserveRequest("/locks/{name}", "POST", 201, 90*time.Microsecond)
			m.ScriptCall("release", false, 40*time.Microsecond)
			m.HoldReleased("lock", lockcore.Exclusive, 3*time.Millisecond)
			m.ObserveRequest("/locks/{name}", "DELETE", 200, 80*time.Microsecond)
		}
	})
}
