package handlers

import (
	"bufio"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Parking lets long-polls wait without an HTTP server goroutine and its buffers. net/http holds two
// goroutines and about 10 KiB of buffers for every open request; a parked request holds no
// goroutine and a few hundred bytes (one epoll goroutine watches all parked connections for
// clients that leave). Once a waiting acquire has joined its
// queue, its handler hijacks the connection and returns; the answer is written when the wait ends,
// and the connection comes back to the HTTP server for its next request through Parking, which is
// a net.Listener: serve it with the same http.Server as the main listener.
//
// Parking is safe for concurrent use.
type Parking struct {
	addr   net.Addr
	back   chan net.Conn
	closed chan struct{}
	once   sync.Once

	mu     sync.Mutex
	parked int           // requests parked and not yet answered
	idle   chan struct{} // closed when parked drops to 0 (made by Wait)
}

// NewParking returns a Parking whose Addr is addr (the main listener's).
func NewParking(addr net.Addr) *Parking {
	return &Parking{addr: addr, back: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept returns the next connection whose parked request has been answered, so the server
// reads its next request; net.ErrClosed once Parking is closed.
func (p *Parking) Accept() (net.Conn, error) {
	select {
	case c := <-p.back:
		return c, nil
	case <-p.closed:
		return nil, net.ErrClosed
	}
}

// Close stops handing connections back: requests answered from now on close their connections
// ("Connection: close"). It is idempotent; http.Server.Shutdown calls it too.
func (p *Parking) Close() error {
	p.once.Do(func() { close(p.closed) })
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
	if p.idle == nil {
		p.idle = make(chan struct{})
	}
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Parking) count(delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked += delta
	if p.parked == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
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
	select {
	case p.back <- c:
	case <-p.closed:
		_ = c.Close()
	}
}

// park takes over a hijacked connection whose request waits; buffered is the server's read buffer
// (it may hold the first bytes of the client's next request). gone is called, once, if the client
// closes the connection before the answer. The caller must answer, exactly once.
func (p *Parking) park(conn net.Conn, buffered *bufio.Reader, keepAlive bool, gone func()) *parkedConn {
	c := &parkedConn{Conn: conn, p: p, keepAlive: keepAlive, gone: gone}
	if n := buffered.Buffered(); n > 0 {
		b, _ := buffered.Peek(n)
		c.ahead = append([]byte(nil), b...)
	}
	p.count(1)
	if !epollWatch(c) {
		c.watched = make(chan struct{})
		go c.watch()
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
	lost      bool   // the client went away (set by the watcher before stop returns)

	// Watched by the epoll watcher (Linux):
	fd      int32
	watchID uint32

	// Watched by a goroutine of its own (elsewhere):
	stopping atomic.Bool
	watched  chan struct{} // closed when watch returns
}

// watch, where epoll is unavailable, reads the connection until the client closes it, which ends the wait, or until stop. A
// client that sends its next request before the answer (pipelining) is alive: its first byte is
// kept and the rest stays in the socket for the server.
func (c *parkedConn) watch() {
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
	if c.watched == nil {
		return epollUnwatch(c)
	}
	c.stopping.Store(true)
	_ = c.Conn.SetReadDeadline(time.Unix(1, 0)) // unblocks watch's Read
	<-c.watched
	_ = c.Conn.SetReadDeadline(time.Time{})
	return c.lost
}

// answerTimeout bounds writing a parked request's answer to a client that does not read.
const answerTimeout = 10 * time.Second

// send writes resp (built by render) and then hands the connection back to the server, or closes
// it when the request or a stopping server asks for that. The watch must have been stopped.
func (c *parkedConn) send(render func(closing bool) []byte) {
	defer c.p.count(-1)
	closing := !c.keepAlive || c.p.isClosed()
	_ = c.Conn.SetWriteDeadline(time.Now().Add(answerTimeout))
	_, err := c.Conn.Write(render(closing))
	_ = c.Conn.SetWriteDeadline(time.Time{})
	if err != nil || closing {
		_ = c.Conn.Close()
		return
	}
	if len(c.ahead) == 0 {
		c.p.giveBack(c.Conn)
		return
	}
	c.p.giveBack(&readAheadConn{Conn: c.Conn, ahead: c.ahead})
}

// drop closes the connection of a client that went away.
func (c *parkedConn) drop() {
	defer c.p.count(-1)
	_ = c.Conn.Close()
}

// readAheadConn is a connection given back to the server with the bytes read from it while parked.
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
