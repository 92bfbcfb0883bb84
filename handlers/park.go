package handlers

import (
	"bufio"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Parking lets long-polls wait without an HTTP server goroutine and its buffers. net/http holds
// two goroutines and about 10 KiB of buffers for every open request; a parked request holds no
// goroutine and a few hundred bytes. Once a waiting acquire has joined its queue, its handler
// hijacks the connection and returns. One epoll goroutine per process watches every parked
// connection for a client that leaves; the answer is written when the wait ends. The connection
// then waits, still without a goroutine, for the client's next request (up to the idle timeout),
// and goes back to the HTTP server with it through Parking, which is a net.Listener: serve it with
// the same http.Server as the main listener.
//
// Answers hand connections back through Parking, so close it before the lock service whose waits
// it parks: Close makes later answers close their connections instead. Parking is safe for
// concurrent use.
type Parking struct {
	addr   net.Addr
	idle   time.Duration
	back   chan net.Conn
	closed chan struct{}
	once   sync.Once

	mu      sync.Mutex
	parked  int                    // requests parked and not yet answered
	drained chan struct{}          // closed when parked drops to 0 (made by Wait)
	idlers  map[*idleConn]struct{} // answered connections waiting for their next request
}

// NewParking returns a Parking whose Addr is addr (the main listener's). An answered connection
// waits up to idle (the server's IdleTimeout; 0 means 2 minutes) for its next request.
func NewParking(addr net.Addr, idle time.Duration) *Parking {
	if idle <= 0 {
		idle = 2 * time.Minute
	}
	return &Parking{addr: addr, idle: idle, back: make(chan net.Conn), closed: make(chan struct{}),
		idlers: map[*idleConn]struct{}{}}
}

// Accept returns the next connection whose client sent a request after its parked one was
// answered; net.ErrClosed once Parking is closed.
func (p *Parking) Accept() (net.Conn, error) {
	if p.isClosed() {
		return nil, net.ErrClosed
	}
	select {
	case c := <-p.back:
		return c, nil
	case <-p.closed:
		return nil, net.ErrClosed
	}
}

// Close stops handing connections back: requests answered from now on close their connections
// ("Connection: close"), and idle ones are closed. It is idempotent; http.Server.Shutdown calls it.
func (p *Parking) Close() error {
	p.once.Do(func() {
		close(p.closed)
		p.mu.Lock()
		idlers := p.idlers
		p.idlers = map[*idleConn]struct{}{}
		p.mu.Unlock()
		for c := range idlers {
			c.shut()
		}
	})
	return nil
}

// Addr returns the main listener's address.
func (p *Parking) Addr() net.Addr { return p.addr }

// Wait returns once every parked request has been answered, or ctx's error if ctx ends first.
func (p *Parking) Wait(ctx context.Context) error {
	p.mu.Lock()
	if p.parked == 0 {
		p.mu.Unlock()
		return nil
	}
	if p.drained == nil {
		p.drained = make(chan struct{})
	}
	drained := p.drained
	p.mu.Unlock()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// count adds delta to the parked requests; a handler counts its request before it hijacks the
// connection, so that Wait cannot miss it.
func (p *Parking) count(delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked += delta
	if p.parked == 0 && p.drained != nil {
		close(p.drained)
		p.drained = nil
	}
}

func (p *Parking) isClosed() bool {
	select {
	case <-p.closed:
		return true
	default:
		return false
	}
}

// giveBack hands c to the server for its next request, or closes it once Parking is closed.
func (p *Parking) giveBack(c net.Conn) {
	if p.isClosed() {
		_ = c.Close()
		return
	}
	select {
	case p.back <- c:
	case <-p.closed:
		_ = c.Close()
	}
}

// park takes over a hijacked connection whose request waits (already counted); buffered is the
// server's read buffer, which may hold the first bytes of the client's next request. gone is
// called, once, if the client closes the connection before the answer. The caller must answer
// with send or drop, exactly once.
func (p *Parking) park(conn net.Conn, buffered *bufio.Reader, keepAlive bool, gone func()) *parkedConn {
	if ra, ok := conn.(*readAheadConn); ok && len(ra.ahead) == 0 {
		conn = ra.Conn // parked again after a pipelined request: do not wrap twice
	}
	c := &parkedConn{Conn: conn, p: p, keepAlive: keepAlive, gone: gone}
	if n := buffered.Buffered(); n > 0 {
		b, _ := buffered.Peek(n)
		c.ahead = append([]byte(nil), b...)
	}
	c.watch = epollWatch(conn, true, func(lost bool) {
		if lost {
			gone()
		}
	})
	if c.watch == nil {
		c.watched = make(chan struct{})
		go c.watchByRead()
	}
	return c
}

// parkedConn is a hijacked connection whose request is waiting for a lock.
type parkedConn struct {
	net.Conn
	p         *Parking
	keepAlive bool   // the request allows another one on this connection
	gone      func() // ends the wait: the client went away
	ahead     []byte // bytes of the client's next request, read before the answer
	answered  atomic.Bool

	watch *watchEntry // watched by the epoll watcher (Linux), else:

	stopping atomic.Bool
	watched  chan struct{} // closed when watchByRead returns
	lost     bool          // set by watchByRead before watched closes
}

// watchByRead, where epoll is unavailable, reads the connection until the client closes it, which
// ends the wait, or until stop. A client that sends its next request before the answer
// (pipelining) is alive: its first byte is kept and the rest stays in the socket for the server.
func (c *parkedConn) watchByRead() {
	defer close(c.watched)
	b := make([]byte, 1)
	n, err := c.Conn.Read(b)
	switch {
	case n > 0:
		c.ahead = append(c.ahead, b[0])
	case err != nil && !c.stopping.Load():
		c.lost = true
		c.gone()
	}
}

// stop ends the watch and reports whether the client went away meanwhile.
func (c *parkedConn) stop() (lost bool) {
	if c.watch != nil {
		_, lost = epollUnwatch(c.watch)
		return lost
	}
	c.stopping.Store(true)
	_ = c.Conn.SetReadDeadline(time.Unix(1, 0)) // unblocks watchByRead's Read
	<-c.watched
	_ = c.Conn.SetReadDeadline(time.Time{})
	return c.lost
}

// answerTimeout bounds writing a parked request's answer to a client that does not read.
const answerTimeout = 10 * time.Second

// send writes the answer (built by render) and keeps the connection for the client's next
// request, or closes it when the request or a stopping server asks for that. The watch must have
// been stopped. It reports whether the answer was written.
func (c *parkedConn) send(render func(closing bool) []byte) bool {
	if !c.answered.CompareAndSwap(false, true) {
		return false
	}
	defer c.p.count(-1)
	closing := !c.keepAlive || c.p.isClosed()
	_ = c.Conn.SetWriteDeadline(time.Now().Add(answerTimeout))
	_, err := c.Conn.Write(render(closing))
	_ = c.Conn.SetWriteDeadline(time.Time{})
	switch {
	case err != nil || closing:
		_ = c.Conn.Close()
	case len(c.ahead) > 0:
		c.p.giveBack(&readAheadConn{Conn: c.Conn, ahead: c.ahead})
	default:
		c.p.keepIdle(c.Conn)
	}
	return err == nil
}

// drop closes the connection of a client that went away; after send it does nothing.
func (c *parkedConn) drop() {
	if !c.answered.CompareAndSwap(false, true) {
		return
	}
	defer c.p.count(-1)
	_ = c.Conn.Close()
}

// idleConn is an answered connection waiting, without a server goroutine, for the client's next
// request: input hands it to the server, a hang-up, the idle timeout or Close closes it.
type idleConn struct {
	net.Conn
	p     *Parking
	watch *watchEntry // nil: watched by a goroutine reading one byte
	timer *time.Timer
}

func (p *Parking) keepIdle(conn net.Conn) {
	c := &idleConn{Conn: conn, p: p}
	// Under p.mu until c is fully set up: the watcher's callback and Close take p.mu first.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isClosed() {
		_ = conn.Close()
		return
	}
	p.idlers[c] = struct{}{}
	c.watch = epollWatch(conn, false, c.ended)
	if c.watch == nil {
		go c.readFirstByte()
		return
	}
	c.timer = time.AfterFunc(p.idle, c.shut)
}

// ended is the watcher's callback: the client sent its next request, or hung up. The watch ended
// by itself, so the connection is this callback's, whoever took it out of the idle set (shut backs
// off when the watch has ended).
func (c *idleConn) ended(lost bool) {
	c.forget()
	if lost || c.p.isClosed() {
		_ = c.Conn.Close()
		return
	}
	go c.p.giveBack(c.Conn) // not on the watcher's goroutine: the server may be slow to accept
}

// forget takes c out of the idle set; it reports false when another path already did.
func (c *idleConn) forget() bool {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if _, ok := c.p.idlers[c]; !ok {
		return false
	}
	delete(c.p.idlers, c)
	if c.timer != nil {
		c.timer.Stop()
	}
	return true
}

// shut closes c unless its next request already came (idle timeout, or Parking closing).
func (c *idleConn) shut() {
	if c.watch == nil { // readFirstByte owns the connection: wake it
		_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
		return
	}
	if ended, _ := epollUnwatch(c.watch); ended {
		return // the watcher's callback handles it
	}
	c.forget()
	_ = c.Conn.Close()
}

// readFirstByte, where epoll is unavailable, waits up to the idle timeout for the next request.
func (c *idleConn) readFirstByte() {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.p.idle))
	b := make([]byte, 1)
	n, _ := c.Conn.Read(b)
	_ = c.Conn.SetReadDeadline(time.Time{})
	c.forget()
	if n == 0 || c.p.isClosed() {
		_ = c.Conn.Close()
		return
	}
	c.p.giveBack(&readAheadConn{Conn: c.Conn, ahead: b})
}

// readAheadConn is a connection given back to the server with bytes already read from it.
type readAheadConn struct {
	net.Conn
	ahead []byte
}

func (c *readAheadConn) Read(b []byte) (int, error) {
	if len(c.ahead) > 0 {
		n := copy(b, c.ahead)
		c.ahead = c.ahead[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// CloseWrite lets the server half-close a TCP connection, as it does for unwrapped ones.
func (c *readAheadConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// SyscallConn exposes the descriptor, so that the connection can be parked again.
func (c *readAheadConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, syscall.EINVAL
	}
	return sc.SyscallConn()
}
