package operations

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/leasegate/leasegate/internal/testkit"
)

// browser is one headless chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: chromium reads commands on its fd 3 and writes answers and events on
// its fd 4, each message one JSON object ended by a NUL byte), with one page attached. It runs in
// real time, so a page with open event streams works as in a desktop browser (a --dump-dom run's
// virtual clock stands still while a request is open). Its methods fail t; call them from the
// test's goroutine only.
type browser struct {
	t             *testing.T
	session       string // the page's DevTools session
	width, height int    // the page's viewport, in CSS pixels

	out  *os.File // our end of chromium's fd 3
	done chan struct{}

	mu         sync.Mutex
	next       int
	answers    map[int]chan cdpMessage
	exceptions []string // the page's uncaught JavaScript exceptions
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// newBrowser starts chromium on a fresh profile in dir with a 1280x800 page (see viewport); it is
// killed, with its helper processes, when t ends.
func newBrowser(t *testing.T, chromium, dir string) *browser {
	t.Helper()
	profile, err := os.MkdirTemp(dir, "chromium-profile-")
	require.NoError(t, err)
	commands, out, err := os.Pipe()
	require.NoError(t, err)
	in, answers, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(chromium,
		"--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
		"--disable-background-timer-throttling", "--disable-renderer-backgrounding",
		"--disable-backgrounding-occluded-windows", "--hide-scrollbars",
		"--user-data-dir="+profile, "--remote-debugging-pipe", "about:blank")
	cmd.Dir = dir
	cmd.ExtraFiles = []*os.File{commands, answers} // fds 3 and 4
	stderr := &testkit.LockedBuffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start(), "start chromium")
	commands.Close()
	answers.Close()

	b := &browser{t: t, out: out, done: make(chan struct{}), answers: map[int]chan cdpMessage{}}
	go b.read(in)
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		out.Close()
		in.Close()
		<-b.done
		if t.Failed() {
			var lines []string // but its complaints about the D-Bus a container lacks
			for _, l := range strings.Split(stderr.String(), "\n") {
				if !strings.Contains(l, "dbus") {
					lines = append(lines, l)
				}
			}
			t.Logf("chromium's stderr, last lines:\n%s", uiTail(strings.Join(lines, "\n"), 20))
		}
	})

	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	b.do("Runtime.enable", nil)
	b.do("Page.enable", nil)
	b.viewport(1280, 800)
	return b
}

// viewport sizes the page's window: width x height CSS pixels.
func (b *browser) viewport(width, height int) {
	b.t.Helper()
	b.do("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false})
	b.width, b.height = width, height
}

// read hands each answer to its caller and keeps the page's exceptions, until chromium's end of
// the pipe closes.
func (b *browser) read(in *os.File) {
	defer close(b.done)
	r := bufio.NewReader(in)
	for {
		raw, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMessage
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		if ch, ok := b.answers[m.ID]; ok && m.ID != 0 {
			delete(b.answers, m.ID)
			ch <- m
		} else if m.Method == "Runtime.exceptionThrown" {
			var p struct {
				ExceptionDetails struct {
					Text      string `json:"text"`
					Exception struct {
						Description string `json:"description"`
					} `json:"exception"`
				} `json:"exceptionDetails"`
			}
			_ = json.Unmarshal(m.Params, &p)
			b.exceptions = append(b.exceptions, p.ExceptionDetails.Text+" "+p.ExceptionDetails.Exception.Description)
		}
		b.mu.Unlock()
	}
}

// call sends one command (to the page's session, or to the browser when session is "") and
// decodes its result into result (when not nil), failing t on an error or after 30 s.
func (b *browser) call(session, method string, params any, result any) {
	b.t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	ch := make(chan cdpMessage, 1)
	b.mu.Lock()
	b.next++
	id := b.next
	b.answers[id] = ch
	b.mu.Unlock()
	p, err := json.Marshal(params)
	require.NoError(b.t, err)
	msg, err := json.Marshal(cdpMessage{ID: id, Method: method, SessionID: session, Params: p})
	require.NoError(b.t, err)
	_, err = b.out.Write(append(msg, 0))
	require.NoError(b.t, err, "send %s to chromium", method)
	select {
	case m := <-ch:
		if m.Error != nil {
			b.t.Fatalf("chromium %s: %d %s", method, m.Error.Code, m.Error.Message)
		}
		if result != nil {
			require.NoError(b.t, json.Unmarshal(m.Result, result), "chromium %s's result", method)
		}
	case <-b.done:
		b.t.Fatalf("chromium %s: chromium is gone", method)
	case <-time.After(30 * time.Second):
		b.t.Fatalf("chromium %s: no answer within 30 s", method)
	}
}

// do sends one command to the page.
func (b *browser) do(method string, params any) {
	b.t.Helper()
	b.call(b.session, method, params, nil)
}

// open navigates the page to url.
func (b *browser) open(url string) {
	b.t.Helper()
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	b.call(b.session, "Page.navigate", map[string]any{"url": url}, &nav)
	require.Empty(b.t, nav.ErrorText, "open %s", url)
}

// eval runs a JavaScript expression in the page (awaiting a promise) and decodes its value into
// result (when not nil); an exception fails t.
func (b *browser) eval(expr string, result any) {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if r.ExceptionDetails != nil {
		b.t.Fatalf("evaluating %s: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if result != nil && len(r.Result.Value) > 0 {
		require.NoError(b.t, json.Unmarshal(r.Result.Value, result), "the value of %s", expr)
	}
}

// dom returns the page's document as it is now, parsed.
func (b *browser) dom() *html.Node {
	b.t.Helper()
	var page string
	b.eval(`document.documentElement ? document.documentElement.outerHTML : ""`, &page) // none while a page loads
	doc, err := html.Parse(strings.NewReader(page))
	require.NoError(b.t, err)
	return doc
}

// waitFor polls the page's document every 100 ms until cond holds, and returns that document; it
// fails t after timeout, showing the page's state and status line.
func (b *browser) waitFor(timeout time.Duration, what string, cond func(dom *html.Node) bool) *html.Node {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		dom := b.dom()
		if cond(dom) {
			return dom
		}
		if time.Now().After(deadline) {
			body := domFind(dom, func(n *html.Node) bool { return n.Data == "body" })
			b.t.Fatalf("timed out after %v waiting for %s; page state %q, status line %q, key form %q", timeout, what,
				domAttr(body, "data-state"), domText(domFind(dom, domByID("status"))), domText(domFind(dom, domByID("auth-error"))))
		}
		<-time.After(100 * time.Millisecond)
	}
}

// giveKey types key into the page's key form and submits it.
func (b *browser) giveKey(key string) {
	b.t.Helper()
	k, err := json.Marshal(key)
	require.NoError(b.t, err)
	b.eval(fmt.Sprintf(`(() => { document.getElementById("api-key").value = %s; document.getElementById("auth").requestSubmit(); })()`, k), nil)
}

// click clicks the element with id.
func (b *browser) click(id string) {
	b.t.Helper()
	b.eval(fmt.Sprintf(`document.getElementById(%q).click()`, id), nil)
}

// screenshot writes a PNG of the whole page, as wide as the viewport, to path and returns its
// height.
func (b *browser) screenshot(path string) int {
	b.t.Helper()
	var metrics struct {
		CSSContentSize struct {
			Height float64 `json:"height"`
		} `json:"cssContentSize"`
	}
	b.call(b.session, "Page.getLayoutMetrics", nil, &metrics)
	height := max(b.height, int(metrics.CSSContentSize.Height+0.5))
	var shot struct {
		Data string `json:"data"`
	}
	b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": b.width, "height": height, "scale": 1}}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	require.NoError(b.t, err)
	require.NoError(b.t, os.WriteFile(path, png, 0o644))
	return height
}

// colour returns the average colour, red, green and blue from 0 to 255, that the page draws in
// the box of the first element matching the CSS selector.
func (b *browser) colour(selector string) (red, green, blue float64) {
	b.t.Helper()
	var box struct{ X, Y, Width, Height float64 }
	b.eval(fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect();
		return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}; })()`, selector), &box)
	require.Positive(b.t, box.Width*box.Height, "%s has no box", selector)
	var shot struct {
		Data string `json:"data"`
	}
	b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": box.X, "y": box.Y, "width": box.Width, "height": box.Height, "scale": 1}}, &shot)
	raw, err := base64.StdEncoding.DecodeString(shot.Data)
	require.NoError(b.t, err)
	img, err := png.Decode(bytes.NewReader(raw))
	require.NoError(b.t, err)
	n := 0.0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			red, green, blue, n = red+float64(r>>8), green+float64(g>>8), blue+float64(bl>>8), n+1
		}
	}
	return red / n, green / n, blue / n
}

// exceptionsSoFar returns the page's uncaught exceptions.
func (b *browser) exceptionsSoFar() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.exceptions...)
}
