package handlers

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParkingCloseClosesEveryIdleConnection races clients sending their next request against
// Parking.Close: whichever wins, every idle connection ends up closed, none leaks.
func TestParkingCloseClosesEveryIdleConnection(t *testing.T) {
	const n = 300
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	p := NewParking(ln.Addr(), time.Minute)

	clients := make([]net.Conn, n)
	for i := range clients {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		clients[i] = c
		s, err := ln.Accept()
		require.NoError(t, err)
		p.keepIdle(s)
	}

	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Write([]byte("G"))
		}()
	}
	require.NoError(t, p.Close())
	wg.Wait()

	deadline := time.Now().Add(10 * time.Second)
	for i, c := range clients {
		require.NoError(t, c.SetReadDeadline(deadline))
		_, err := c.Read(make([]byte, 1))
		assert.True(t, errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err),
			"client %d: its idle connection was closed (got %v)", i, err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}
