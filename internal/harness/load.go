package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Load for the benchmarks (bench/ and tests/deployments'): bounded loops of acquire+release
// calls against a gateway, with no spec validation and no reporting through a test.

// Cycles runs n clients for d, client i acquiring at acquire (POST body, 201) and releasing at
// release (DELETE with the grant's token, 200) in a loop, and returns completed cycles per second.
// Any unexpected status aborts the run.
func Cycles(n int, d time.Duration, target func(i int) (acquire string, body []byte, release string)) (float64, error) {
	tr := &http.Transport{MaxIdleConns: n, MaxIdleConnsPerHost: n}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		done    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		runErr  error
	)
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acquire, body, release := target(i)
			for ctx.Err() == nil {
				tok, err := Call(client, http.MethodPost, acquire, "", body, http.StatusCreated)
				if err == nil {
					_, err = Call(client, http.MethodDelete, release, tok, nil, http.StatusOK)
				}
				if err != nil {
					errOnce.Do(func() { runErr = err; cancel() })
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), runErr
}

// Call sends one request (a JSON body, a Lease-Token when token is set) and returns the answer's
// token, or an error when the status is not want.
func Call(c *http.Client, method, url, token string, body []byte, want int) (string, error) {
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Lease-Token", token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return "", fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	var g struct {
		Token string `json:"token"`
	}
	_ = json.Unmarshal(b, &g)
	return g.Token, nil
}
