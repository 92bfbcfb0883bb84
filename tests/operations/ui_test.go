package operations

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// uiLongHold is the gateway's LEASEGATE_LONG_HOLD in the dashboard test: short, so that one lock
// passes it while the test runs.
const uiLongHold = 2 * time.Second

// TestUIDashboardInHeadlessChromium creates locks of each kind through the API (a long exclusive
// hold with an owner that looks like HTML, a shared lock of two readers, a lock with a waiter, a
// watchdog lease), renders GET /ui in Debian's headless chromium and checks the DOM it dumps: a
// row per lock with its owner as text, the long hold highlighted, the waiter counted, a
// force-release button per row, and the top lists. It then takes a 1280x800 screenshot, written
// to docs/ui-screenshot.png when LEASEGATE_UI_SCREENSHOT=1 (else into the test's temp dir).
//
// Chromium loads /ui?live=0 (polling only, no events streams): its --virtual-time-budget clock
// stands still while any request is open, and an events stream never ends, so with streams the
// budget would never run out and --dump-dom would never dump.
func TestUIDashboardInHeadlessChromium(t *testing.T) {
	t.Parallel()
	chromium := testkit.DebianTool(t, "chromium", "chromium", "chromium-browser")
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_LONG_HOLD": uiLongHold.String()})

	// The page itself: the threshold rendered into it, and the headers that keep it to itself.
	page, err := http.Get(e.Gateway.URL + "/ui")
	require.NoError(t, err)
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(page.Body)
	page.Body.Close()
	require.Equal(t, http.StatusOK, page.StatusCode, "GET /ui: %s", body)
	assert.Equal(t, "text/html; charset=utf-8", page.Header.Get("Content-Type"))
	assert.Contains(t, page.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	assert.Contains(t, body.String(), fmt.Sprintf(`data-long-hold-ms="%d"`, uiLongHold.Milliseconds()))

	// The long hold first, then wait (on the gateway's clock) until it is past the threshold.
	const longOwner = `deployer <ci@example.com> & "co"` // user input that would be markup if misused
	long := e.Client.Do(http.MethodPost, "/locks/deploy.production", nil, testkit.AcquireBody(longOwner, 120000))
	require.Equal(t, http.StatusCreated, long.Status, string(long.Body))
	testkit.EventuallyPaced(t, 15*time.Second, "deploy.production held past LEASEGATE_LONG_HOLD", func() bool {
		r := e.Client.Do(http.MethodGet, "/locks?prefix=deploy.", nil, "")
		for _, l := range r.JSON()["locks"].([]any) {
			if m := l.(map[string]any); m["lock"] == "deploy.production" {
				age, _ := m["age_ms"].(json.Number).Int64()
				return age > uiLongHold.Milliseconds()
			}
		}
		return false
	})

	for _, reader := range []string{"report-reader-1", "report-reader-2"} {
		r := e.Client.Do(http.MethodPost, "/locks/reports.price-table", nil, testkit.SharedBody(reader, 120000, 0))
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	r := e.Client.Do(http.MethodPost, "/locks/billing.nightly", nil, testkit.WatchdogBody("billing-worker-7", 30000, ""))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	r = e.Client.Do(http.MethodPost, "/locks/orders.42", nil, testkit.AcquireBody("orders-worker-1", 120000))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	waitCtx, stopWaiting := context.WithCancel(context.Background())
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		e.Client.DoContext(waitCtx, http.MethodPost, "/locks/orders.42", nil, testkit.WaitBody("orders-worker-2", 120000, 60000))
	}()
	t.Cleanup(func() { stopWaiting(); <-waited }) // before the gateway stops
	harness.Eventually(t, 10*time.Second, "a waiter queued on orders.42", func() bool { return e.Waiters(t, "orders.42") == 1 })

	dir := t.TempDir()
	dom, err := html.Parse(strings.NewReader(runChromium(t, chromium, dir, "--dump-dom", e.Gateway.URL+"/ui?live=0")))
	require.NoError(t, err)

	bodyEl := domFind(dom, func(n *html.Node) bool { return n.Data == "body" })
	require.NotNil(t, bodyEl)
	require.Equal(t, "ready", domAttr(bodyEl, "data-state"), "the page listed the locks; status line: %q",
		domText(domFind(dom, domByID("status"))))
	assert.Equal(t, strconv.FormatInt(uiLongHold.Milliseconds(), 10), domAttr(bodyEl, "data-long-hold-ms"))
	assert.Empty(t, domText(domFind(dom, domByID("status"))), "no API error in the status line")

	rows := map[string]*html.Node{}
	for _, tr := range domFindAll(dom, func(n *html.Node) bool { return n.Data == "tr" && domHasClass(n, "lock-row") }) {
		rows[domAttr(tr, "data-lock")] = tr
	}
	names := make([]string, 0, len(rows))
	for name := range rows {
		names = append(names, name)
	}
	slices.Sort(names)
	require.Equal(t, []string{"billing.nightly", "deploy.production", "orders.42", "reports.price-table"}, names)

	cell := func(lock, class string) string {
		return domText(domFind(rows[lock], func(n *html.Node) bool { return n.Data == "td" && domHasClass(n, class) }))
	}
	assert.Equal(t, longOwner, cell("deploy.production", "owner"), "the owner is text, not markup")
	assert.Nil(t, domFind(dom, func(n *html.Node) bool { return strings.HasPrefix(n.Data, "ci@") }), "no element made of an owner")
	assert.Equal(t, "exclusive", cell("deploy.production", "mode"))
	assert.Equal(t, strconv.FormatInt(long.Int("fence"), 10), cell("deploy.production", "fence"))
	assert.True(t, domHasClass(rows["deploy.production"], "long-hold"), "deploy.production is highlighted as a long hold")

	assert.Contains(t, []string{"report-reader-1", "report-reader-2"}, cell("reports.price-table", "owner"))
	assert.Equal(t, "shared", cell("reports.price-table", "mode"))
	assert.Equal(t, "2", cell("reports.price-table", "holders"))

	assert.Equal(t, "orders-worker-1", cell("orders.42", "owner"))
	assert.Equal(t, "1", cell("orders.42", "waiters"))
	assert.True(t, domHasClass(rows["orders.42"], "contended"))
	assert.Equal(t, "0", cell("deploy.production", "waiters"))

	assert.Equal(t, "billing-worker-7", cell("billing.nightly", "owner"))
	assert.Equal(t, "on", cell("billing.nightly", "watchdog"))
	assert.Equal(t, "off", cell("orders.42", "watchdog"))

	for lock, tr := range rows {
		age, err := strconv.ParseInt(domAttr(tr, "data-age-ms"), 10, 64)
		require.NoError(t, err, "row %s: data-age-ms", lock)
		assert.Equal(t, age > uiLongHold.Milliseconds(), domHasClass(tr, "long-hold"), "row %s (age %d ms): long-hold class iff past the threshold", lock, age)
		btn := domFind(tr, func(n *html.Node) bool { return n.Data == "button" && domHasClass(n, "force-release") })
		if assert.NotNil(t, btn, "row %s: a force-release button", lock) {
			assert.Equal(t, lock, domAttr(btn, "data-lock"))
		}
	}

	// The top lists: every lock here may outlive 2 s (long TTLs, a watchdog), so all are listed,
	// the oldest first; the wait on orders.42 counts as contention.
	longest := domFindAll(domFind(dom, domByID("longest-held")), func(n *html.Node) bool { return n.Data == "li" })
	if assert.NotEmpty(t, longest, "longest-held list") {
		assert.Equal(t, "deploy.production", domAttr(longest[0], "data-lock"))
		assert.True(t, domHasClass(longest[0], "long-hold"))
	}
	contended := domFindAll(domFind(dom, domByID("most-contended")), func(n *html.Node) bool { return n.Data == "li" })
	assert.True(t, slices.ContainsFunc(contended, func(n *html.Node) bool { return domAttr(n, "data-lock") == "orders.42" }),
		"orders.42 among the most contended")

	// The screenshot, where a developer can look at it.
	shot := filepath.Join(dir, "ui-screenshot.png")
	if os.Getenv("LEASEGATE_UI_SCREENSHOT") == "1" {
		root, err := harness.ModuleRoot()
		require.NoError(t, err)
		shot = filepath.Join(root, "docs", "ui-screenshot.png")
	}
	runChromium(t, chromium, dir, "--screenshot="+shot, "--window-size=1280,800", "--hide-scrollbars", e.Gateway.URL+"/ui?live=0")
	f, err := os.Open(shot)
	require.NoError(t, err, "chromium wrote no screenshot")
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, "the screenshot is a PNG")
	assert.Equal(t, 1280, img.Bounds().Dx())
	assert.Equal(t, 800, img.Bounds().Dy())
	st, err := f.Stat()
	require.NoError(t, err)
	assert.Greater(t, st.Size(), int64(20000), "a page with a table, not a blank one")
	t.Logf("screenshot: %s (%d bytes)", shot, st.Size())
}

// runChromium runs headless chromium once on a fresh profile in dir, with args after the common
// flags, bounded by 60 s, and returns its standard output. Chromium and its helper processes run in
// a process group of their own, killed when the run ends.
func runChromium(t *testing.T, chromium, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	profile, err := os.MkdirTemp(dir, "chromium-profile-")
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, chromium, append([]string{
		"--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
		"--user-data-dir=" + profile,
		// The page's timers run on a virtual clock that chromium advances whenever no request is
		// open: 5 s of it is two or three re-lists, after which the DOM is dumped.
		"--virtual-time-budget=5000",
	}, args...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	require.NoError(t, cmd.Start(), "start chromium")
	err = cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // helpers left behind, if any
	if ctx.Err() != nil {
		t.Fatalf("chromium %s: no answer within 60 s; stderr:\n%s", strings.Join(args, " "), uiTail(stderr.String(), 20))
	}
	if err != nil {
		t.Fatalf("chromium %s: %v; stderr:\n%s", strings.Join(args, " "), err, uiTail(stderr.String(), 20))
	}
	return stdout.String()
}

func uiTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// domFindAll returns the element nodes under n (n included) that match, in document order.
func domFindAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	if n == nil {
		return nil
	}
	var out []*html.Node
	for d := range n.Descendants() {
		if d.Type == html.ElementNode && match(d) {
			out = append(out, d)
		}
	}
	if n.Type == html.ElementNode && match(n) {
		out = append([]*html.Node{n}, out...)
	}
	return out
}

func domFind(n *html.Node, match func(*html.Node) bool) *html.Node {
	if all := domFindAll(n, match); len(all) > 0 {
		return all[0]
	}
	return nil
}

func domByID(id string) func(*html.Node) bool {
	return func(n *html.Node) bool { return domAttr(n, "id") == id }
}

func domAttr(n *html.Node, key string) string {
	if n == nil {
		return ""
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func domHasClass(n *html.Node, class string) bool {
	return slices.Contains(strings.Fields(domAttr(n, "class")), class)
}

// domText is the text content of n, trimmed.
func domText(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.TrimSpace(b.String())
}
