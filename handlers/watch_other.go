//go:build !linux

package handlers

import "net"

// Without epoll, connections are watched by a goroutine of their own each (see
// parkedConn.watchByRead and idleConn.readFirstByte).

type watchEntry struct{}

func epollWatch(net.Conn, bool, func(lost bool)) *watchEntry { return nil }

func epollUnwatch(*watchEntry) (ended, lost bool) { return false, false }
