package main

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"
)

// The metrics port holds at most metricsMaxConns connections: idle keep-alive
// connections past that cannot pile up goroutines and descriptors in the
// daemon, and one more is served as soon as one of them goes.
func TestMetricsConnectionLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, lim := newMetricsHTTP(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lim) }()
	defer func() {
		srv.Close()
		<-done
	}()
	get := func(c net.Conn, wait time.Duration) error {
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range metricsMaxConns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if err := get(c, 5*time.Second); err != nil {
			t.Fatalf("connection %d: %v", len(held), err)
		}
	}
	extra, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := get(extra, 300*time.Millisecond); err == nil {
		t.Fatalf("served a connection past the limit of %d", metricsMaxConns)
	}
	held[0].Close()
	held = held[1:]
	extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil {
		t.Fatalf("after one connection went: %v", err)
	}
	resp.Body.Close()
}
