//go:build linux

package handlers

import (
	"sync"
	"syscall"
)

// epollWatcher watches every parked connection of the process for its client leaving, with one
// epoll instance and one goroutine, instead of a goroutine blocked in Read per connection. It lives
// as long as the process, like the runtime's own network poller, and is started by the first park.
type epollWatcher struct {
	epfd int

	mu    sync.Mutex
	conns map[int32]*parkedConn // by file descriptor
	seq   uint32                // registration number, to tell a reused descriptor's stale events
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
		watcher = &epollWatcher{epfd: fd, conns: map[int32]*parkedConn{}}
		go watcher.loop()
	})
	return watcher
}

// epollWatch starts watching c; it reports false when c cannot be watched this way.
func epollWatch(c *parkedConn) bool {
	w := sharedWatcher()
	sc, ok := c.Conn.(syscall.Conn)
	if w == nil || !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	added := false
	err = rc.Control(func(fd uintptr) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.seq++
		ev := syscall.EpollEvent{
			Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
			Fd:     int32(fd),
			Pad:    int32(w.seq),
		}
		if syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev) == nil {
			c.fd, c.watchID, added = int32(fd), w.seq, true
			w.conns[c.fd] = c
		}
	})
	return err == nil && added
}

// epollUnwatch stops watching c (before its descriptor is closed or handed back) and reports
// whether its client left.
func epollUnwatch(c *parkedConn) (lost bool) {
	w := watcher
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns[c.fd] == c {
		delete(w.conns, c.fd)
		_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(c.fd), nil)
	}
	return c.lost
}

// loop turns readiness into departures: a hang-up or error means the client left. Plain input
// means it sent its next request early (pipelining): the bytes stay in the socket for the server,
// and the connection is watched for hang-ups only from then on.
func (w *epollWatcher) loop() {
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(w.epfd, events, -1)
		if err != nil {
			continue // EINTR
		}
		for _, ev := range events[:n] {
			w.mu.Lock()
			c := w.conns[ev.Fd]
			if c == nil || c.watchID != uint32(ev.Pad) {
				w.mu.Unlock()
				continue
			}
			lost := ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
			if !lost {
				rearm := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: ev.Fd, Pad: ev.Pad}
				if syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_MOD, int(ev.Fd), &rearm) == nil {
					w.mu.Unlock()
					continue
				}
			}
			delete(w.conns, ev.Fd)
			_ = syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(ev.Fd), nil)
			c.lost = lost
			w.mu.Unlock()
			if lost {
				c.gone()
			}
		}
	}
}
