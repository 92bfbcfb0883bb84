//go:build linux

package handlers

import (
	"net"
	"sync"
	"syscall"
)

// epollWatcher watches connections that have no server goroutine (parked long-polls, and answered
// connections waiting for their next request) with one epoll instance and one goroutine for the
// whole process, instead of a goroutine blocked in Read per connection. It lives as long as the
// process, like the runtime's own network poller, and is started by the first watch.
type epollWatcher struct {
	epfd int

	mu      sync.Mutex
	entries map[int32]*watchEntry // by file descriptor
	seq     uint32                // registration number, to tell a reused descriptor's stale events
	broken  bool                  // epoll_wait failed for good: watch nothing more
}

// watchEntry is one watched connection.
type watchEntry struct {
	fd          int32
	id          uint32
	keepOnInput bool            // input means alive: from then on, watch for hang-ups only
	onEnd       func(lost bool) // called once, off the watcher's lock, when the watch ends by itself
	ended, lost bool            // guarded by the watcher's mu
}

var (
	watcherOnce sync.Once
	watcher     *epollWatcher // nil when epoll is unavailable
)

func sharedWatcher() *epollWatcher {
	watcherOnce.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		watcher = &epollWatcher{epfd: fd, entries: map[int32]*watchEntry{}}
		go watcher.loop()
	})
	return watcher
}

// epollWatch watches conn until epollUnwatch, or until the client hangs up or (unless keepOnInput)
// sends input, which calls onEnd(lost). It returns nil when conn cannot be watched this way. The
// connection must stay open until epollUnwatch or onEnd.
func epollWatch(conn net.Conn, keepOnInput bool, onEnd func(lost bool)) *watchEntry {
	w := sharedWatcher()
	sc, ok := conn.(syscall.Conn)
	if w == nil || !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var e *watchEntry
	err = rc.Control(func(fd uintptr) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.broken {
			return
		}
		w.seq++
		ev := syscall.EpollEvent{
			Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
			Fd:     int32(fd),
			Pad:    int32(w.seq),
		}
		if syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev) == nil {
			e = &watchEntry{fd: int32(fd), id: w.seq, keepOnInput: keepOnInput, onEnd: onEnd}
			w.entries[e.fd] = e
		}
	})
	if err != nil {
		return nil
	}
	return e
}

// epollUnwatch stops watching e (before its connection is closed or handed on). It reports whether
// the watch had already ended by itself (onEnd has been or is being called) and whether the client
// hung up.
func epollUnwatch(e *watchEntry) (ended, lost bool) {
	w := watcher
	w.mu.Lock()
	defer w.mu.Unlock()
	if !e.ended && w.entries[e.fd] == e {
		delete(w.entries, e.fd)
		_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(e.fd), nil)
		return false, e.lost
	}
	return e.ended, e.lost
}

// loop turns readiness into events: a hang-up or error means the client left. Plain input on a
// parked connection means the client sent its next request early (pipelining): the bytes stay in
// the socket for the server, and the connection is watched for hang-ups only from then on.
func (w *epollWatcher) loop() {
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(w.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil { // cannot happen with a valid epoll descriptor; stop rather than spin
			w.mu.Lock()
			w.broken = true
			w.mu.Unlock()
			return
		}
		for _, ev := range events[:n] {
			if e := w.take(ev); e != nil {
				e.onEnd(e.lost)
			}
		}
	}
}

// take applies one event; it returns the entry whose watch the event ended, if any.
func (w *epollWatcher) take(ev syscall.EpollEvent) *watchEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.entries[ev.Fd]
	if e == nil || e.id != uint32(ev.Pad) {
		return nil // the descriptor was unwatched (and maybe reused) since the event
	}
	lost := ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
	if !lost && e.keepOnInput {
		rearm := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: ev.Fd, Pad: ev.Pad}
		if syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_MOD, int(ev.Fd), &rearm) == nil {
			return nil
		}
	}
	delete(w.entries, ev.Fd)
	_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(ev.Fd), nil)
	e.ended, e.lost = true, lost
	return e
}
