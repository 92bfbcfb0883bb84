//go:build !linux

package handlers

// Without epoll, every parked connection is watched by a goroutine of its own (see parkedConn.watch).

func epollWatch(*parkedConn) bool { return false }

func epollUnwatch(*parkedConn) bool { return false }
