package operations

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/leasegate/leasegate/internal/harness"
	"github.com/leasegate/leasegate/internal/testkit"
)

// uiLongHold is the gateway's LEASEGATE_LONG_HOLD in the dashboard test: short, so that the
// first lock passes it while the test runs, long enough that the others do not before the
// screenshot (a few seconds after they were taken).
const uiLongHold = 8 * time.Second

// uiTimeout bounds each wait for the page to show something: a re-list every 2 s, on a busy machine.
const uiTimeout = 20 * time.Second

// waiters runs requests that wait in a goroutine each, and cancels those still waiting when the
// test ends, before its gateway stops.
type waiters struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newWaiters(t *testing.T) *waiters {
	w := &waiters{}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() { w.cancel(); w.wg.Wait() })
	return w
}

// start sends the request in a goroutine; its response arrives on the returned channel.
func (w *waiters) start(c *harness.Client, method, path string, h harness.Headers, body string) <-chan *harness.Response {
	out := make(chan *harness.Response, 1)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		out <- c.DoContext(w.ctx, method, path, h, body)
	}()
	return out
}

// TestUIDashboardInHeadlessChromium holds locks and semaphores of each kind through the API (a
// long exclusive hold whose owner looks like HTML, a shared lock of two readers, a lock with a
// waiter, a watchdog lease, a semaphore with its permits used up and a waiter, one with permits
// free, a multi-lock and a second one waiting for one of its members) and two elections (one
// whose leader's value looks like HTML, with a candidate in line), opens GET /ui in headless
// chromium in a 1400x1000 window (driven over the DevTools protocol, in real time, with its
// events streams) and checks the page: every holder of each name, who waits and since when, the
// fences in groups of digits, the semaphores in their own table (a full one's bar not green, as
// drawn), the multi-locks' groups, the long hold highlighted, the top lists with kinds (Most
// contended saying it is this replica's), the elections' leaders with their values as text and
// their candidates named. It then changes locks and elections and checks the Live events panel
// shows the changes, in view without scrolling, from a stream (a lock someone waits for, an
// election with a candidate: a new value, a resignation and the candidate's election) and from the
// listings (a lock no stream follows). Its screenshot of the page goes to docs/ui-screenshot.png
// when LEASEGATE_UI_SCREENSHOT=1 (else into the test's temp dir).
func TestUIDashboardInHeadlessChromium(t *testing.T) {
	t.Parallel()
	chromium := testkit.DebianTool(t, "chromium", "chromium", "chromium-browser")
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_LONG_HOLD": uiLongHold.String()})
	c := e.Client
	wait := newWaiters(t)

	// The page itself: the same files for everyone, and the headers that keep it to itself.
	page, err := http.Get(e.Gateway.URL + "/ui")
	require.NoError(t, err)
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(page.Body)
	page.Body.Close()
	require.Equal(t, http.StatusOK, page.StatusCode, "GET /ui: %s", body)
	assert.Equal(t, "text/html; charset=utf-8", page.Header.Get("Content-Type"))
	assert.Contains(t, page.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	assert.NotContains(t, body.String(), strconv.FormatInt(uiLongHold.Milliseconds(), 10), "the page carries no setting")

	// The long hold first, then wait (on the gateway's clock) until it is past the threshold.
	const longOwner = `deployer <ci@example.com> & "co"` // user input that would be markup if misused
	long := c.Do(http.MethodPost, "/locks/deploy.production", nil, testkit.AcquireBody(longOwner, 120000))
	require.Equal(t, http.StatusCreated, long.Status, string(long.Body))
	testkit.EventuallyPaced(t, uiLongHold+10*time.Second, "deploy.production held past LEASEGATE_LONG_HOLD", func() bool {
		r := c.Do(http.MethodGet, "/locks?prefix=deploy.production", nil, "")
		locks := r.JSON()["locks"].([]any)
		return len(locks) == 1 && num(locks[0].(map[string]any)["age_ms"]) > uiLongHold.Milliseconds()
	})

	for _, reader := range []string{"report-reader-1", "report-reader-2"} {
		r := c.Do(http.MethodPost, "/locks/reports.price-table", nil, testkit.SharedBody(reader, 120000, 0))
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	}
	r := c.Do(http.MethodPost, "/locks/billing.nightly", nil, testkit.WatchdogBody("billing-worker-7", 30000, ""))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	orders := c.Do(http.MethodPost, "/locks/orders.42", nil, testkit.AcquireBody("orders-worker-1", 120000))
	require.Equal(t, http.StatusCreated, orders.Status, string(orders.Body))
	ordersWaiter := wait.start(c, http.MethodPost, "/locks/orders.42", nil, testkit.WaitBody("orders-worker-2", 120000, 60000))
	harness.Eventually(t, 10*time.Second, "a waiter queued on orders.42", func() bool { return e.Waiters(t, "orders.42") == 1 })

	var permits []*harness.Response
	for _, job := range []string{"gpu-job-1", "gpu-job-2"} {
		r := c.Do(http.MethodPost, "/semaphores/pool.gpu", nil, testkit.PermitBody(job, 2, 120000, 0))
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		permits = append(permits, r)
	}
	permitWaiter := wait.start(c, http.MethodPost, "/semaphores/pool.gpu", nil, testkit.PermitBody("gpu-job-3", 2, 120000, 60000))
	harness.Eventually(t, 10*time.Second, "a waiter queued on pool.gpu", func() bool {
		return c.Do(http.MethodGet, "/semaphores/pool.gpu", nil, "").Int("waiters") == 1
	})
	r = c.Do(http.MethodPost, "/semaphores/pool.cpu", nil, testkit.PermitBody("cpu-job-1", 4, 120000, 0))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))

	train := testkit.LockAll(c, "release-train", []string{"deploy.eu", "deploy.us"}, 120000, 0, "")
	require.Equal(t, http.StatusCreated, train.Status, string(train.Body))
	// hotfix takes its members in name order: it waits for deploy.us, holding nothing yet.
	wait.start(c, http.MethodPost, "/multilocks", nil, testkit.MultiBody("hotfix", []string{"deploy.us", "deploy.zz"}, 120000, 60000, ""))
	harness.Eventually(t, 10*time.Second, "the hotfix group queued on deploy.us", func() bool { return e.Waiters(t, "deploy.us") == 1 })

	// Two elections: one whose leader's value looks like HTML, with a candidate in line (so the
	// page follows its stream), and one without candidates.
	const markupValue = `<b onmouseover="alert(1)">10.0.3.7:8080</b> & "co"`
	sched := c.Do(http.MethodPost, "/elections/scheduler", nil, uiCampaignBody("sched-1", markupValue, 0))
	require.Equal(t, http.StatusCreated, sched.Status, string(sched.Body))
	schedWaiter := wait.start(c, http.MethodPost, "/elections/scheduler", nil, uiCampaignBody("sched-2", "10.0.3.8:8080", 60000))
	harness.Eventually(t, 10*time.Second, "a candidate in line for scheduler", func() bool {
		return c.Do(http.MethodGet, "/elections/scheduler", nil, "").Int("candidates") == 1
	})
	cache := c.Do(http.MethodPost, "/elections/cache.primary", nil, uiCampaignBody("cache-a", "10.0.9.1:6379", 0))
	require.Equal(t, http.StatusCreated, cache.Status, string(cache.Body))

	dir := t.TempDir()
	b := newBrowser(t, chromium, dir)
	b.viewport(1400, 1000)
	b.open(e.Gateway.URL + "/ui")
	dom := b.waitFor(uiTimeout, "the page listing everything, with a stream on orders.42 and on scheduler", func(dom *html.Node) bool {
		locks := uiEntries(dom, "lock")
		return uiState(dom) == "ready" && len(locks) == 6 && len(uiEntries(dom, "semaphore")) == 2 &&
			len(uiEntries(dom, "election")) == 2 && domAttr(locks["orders.42"], "data-live") == "true" &&
			domAttr(uiEntries(dom, "election")["scheduler"], "data-live") == "true"
	})
	assert.Empty(t, domText(domFind(dom, domByID("status"))), "no API error in the status line")
	assert.True(t, domFind(dom, domByID("auth")) != nil && domHasAttr(domFind(dom, domByID("auth")), "hidden"), "no key asked for")

	locks := uiEntries(dom, "lock")
	names := make([]string, 0, len(locks))
	for name := range locks {
		names = append(names, name)
	}
	slices.Sort(names)
	require.Equal(t, []string{"billing.nightly", "deploy.eu", "deploy.production", "deploy.us", "orders.42", "reports.price-table"}, names)

	// The long hold, its owner as text.
	prod := uiHolders(locks["deploy.production"])
	require.Len(t, prod, 1)
	assert.Equal(t, longOwner, uiCell(prod[0], "owner"), "the owner is text, not markup")
	assert.Nil(t, domFind(dom, func(n *html.Node) bool { return strings.HasPrefix(n.Data, "ci@") }), "no element made of an owner")
	assert.Equal(t, "exclusive", uiCell(prod[0], "mode"))
	assert.Equal(t, strconv.FormatInt(long.Int("fence"), 10), uiCell(prod[0], "fence"))
	assert.True(t, domHasClass(locks["deploy.production"], "long-hold"), "deploy.production is highlighted as a long hold")
	assert.True(t, domHasClass(prod[0], "long-hold"))
	for name, tb := range locks {
		age, err := strconv.ParseInt(domAttr(tb, "data-age-ms"), 10, 64)
		require.NoError(t, err, "%s: data-age-ms", name)
		assert.Equal(t, age > uiLongHold.Milliseconds(), domHasClass(tb, "long-hold"), "%s (age %d ms): long-hold iff past the threshold", name, age)
		btn := domFind(tb, func(n *html.Node) bool { return n.Data == "button" && domHasClass(n, "force-release") })
		if assert.NotNil(t, btn, "%s: a force-release button", name) {
			assert.Equal(t, name, domAttr(btn, "data-name"))
			assert.Equal(t, "lock", domAttr(btn, "data-kind"))
		}
	}
	assert.Equal(t, "8.0 s", domText(domFind(dom, domByID("threshold"))), "the threshold, from GET /admin/top")

	// Fences in groups of three digits; the groups a fence shares with the one in the row above are
	// dimmed. The table's first row has none above; the second reader's fence shares its leading
	// groups with the first's (granted a moment apart) and not its last.
	for name, tb := range locks {
		for _, tr := range uiHolders(tb) {
			uiCheckFenceDigits(t, name, tr)
		}
	}
	assert.Empty(t, domFindAll(uiHolders(locks["billing.nightly"])[0], uiByClass("span", "same")), "the first row has no fence above")

	// A shared lock: every holder, each with its fence, mode and TTL.
	readers := uiHolders(locks["reports.price-table"])
	require.Len(t, readers, 2, "one row per reader")
	assert.Equal(t, "2", domAttr(locks["reports.price-table"], "data-holders"))
	var readerOwners []string
	for _, tr := range readers {
		readerOwners = append(readerOwners, uiCell(tr, "owner"))
		assert.Equal(t, "shared", uiCell(tr, "mode"))
		assert.NotEmpty(t, domAttr(tr, "data-fence"))
		assert.Equal(t, domAttr(tr, "data-fence"), uiCell(tr, "fence"))
		assert.Regexp(t, `^(1m \d\ds|2m)$`, uiCell(tr, "ttl"), "TTL left of a 120 s lease")
	}
	assert.ElementsMatch(t, []string{"report-reader-1", "report-reader-2"}, readerOwners)
	digits := domFindAll(readers[1], uiByClass("span", "g"))
	if assert.NotEmpty(t, digits) {
		assert.True(t, domHasClass(digits[0], "same"), "the second reader's fence shares its first digits with the first's")
		assert.False(t, domHasClass(digits[len(digits)-1], "same"), "and not its last")
	}

	// Who waits, and since when.
	assert.Equal(t, "orders-worker-1", uiCell(uiHolders(locks["orders.42"])[0], "owner"))
	assert.True(t, domHasClass(locks["orders.42"], "contended"))
	queued := uiWaiting(locks["orders.42"])
	require.Len(t, queued, 1)
	assert.Equal(t, "orders-worker-2", domAttr(queued[0], "data-owner"))
	assert.Equal(t, "exclusive", domAttr(queued[0], "data-mode"))
	uiSince(t, queued[0])
	assert.Contains(t, domText(domFind(locks["orders.42"], uiByClass("td", "waiting"))), "1 waiting")
	assert.Empty(t, uiWaiting(locks["deploy.production"]))

	assert.Equal(t, "billing-worker-7", uiCell(uiHolders(locks["billing.nightly"])[0], "owner"))
	assert.Equal(t, "on", uiCell(uiHolders(locks["billing.nightly"])[0], "watchdog"))
	assert.Equal(t, "off", uiCell(uiHolders(locks["orders.42"])[0], "watchdog"))

	// The multi-lock: both members held by the group's lease, shown as one group; the second
	// group waiting for deploy.us with its own.
	group := train.Str("id")
	for _, member := range []string{"deploy.eu", "deploy.us"} {
		hs := uiHolders(locks[member])
		require.Len(t, hs, 1, member)
		assert.Equal(t, group, domAttr(hs[0], "data-multilock"), member)
		badge := domFind(hs[0], func(n *html.Node) bool { return domHasClass(n, "group") })
		if assert.NotNil(t, badge, "%s: a group badge", member) {
			assert.Equal(t, group, domAttr(badge, "data-group"))
			assert.Equal(t, "group "+group[2:10], domText(badge))
		}
	}
	hotfixWaits := uiWaiting(locks["deploy.us"])
	require.Len(t, hotfixWaits, 1)
	assert.Equal(t, "hotfix", domAttr(hotfixWaits[0], "data-owner"))
	hotfix := domAttr(hotfixWaits[0], "data-multilock")
	assert.True(t, strings.HasPrefix(hotfix, "m-") && hotfix != group, "the waiting group's id: %q", hotfix)
	groups := map[string]*html.Node{}
	for _, li := range domFindAll(domFind(dom, domByID("groups")), func(n *html.Node) bool { return n.Data == "li" }) {
		groups[domAttr(li, "data-group")] = li
	}
	require.Len(t, groups, 2, "the Multi-locks panel")
	assert.Equal(t, "deploy.eu deploy.us", domAttr(groups[group], "data-holds"))
	assert.Contains(t, domText(groups[group]), "release-train")
	assert.Equal(t, "deploy.us", domAttr(groups[hotfix], "data-waits-for"))
	assert.Contains(t, domText(groups[hotfix]), "waits for deploy.us")

	// The semaphore, in a table of its own: permits used of its size, each permit's holder, who waits.
	sems := uiEntries(dom, "semaphore")
	pool := sems["pool.gpu"]
	require.NotNil(t, pool)
	assert.Equal(t, "2 / 2", domText(domFind(pool, uiByClass("td", "permits"))))
	assert.Equal(t, "true", domAttr(domFind(pool, uiByClass("td", "permits")), "data-full"))
	assert.Equal(t, "1 / 4", domText(domFind(sems["pool.cpu"], uiByClass("td", "permits"))))
	assert.Equal(t, "false", domAttr(domFind(sems["pool.cpu"], uiByClass("td", "permits")), "data-full"))
	// As drawn: a full semaphore's bar is not green (red over green), one with permits free is.
	red, green, _ := b.colour(`tbody.entry[data-name="pool.gpu"] meter`)
	assert.Greater(t, red, green+30, "pool.gpu is full: its bar (average colour %.0f,%.0f) is not green", red, green)
	red, green, _ = b.colour(`tbody.entry[data-name="pool.cpu"] meter`)
	assert.Greater(t, green, red, "pool.cpu has permits free: its bar (average colour %.0f,%.0f) is green", red, green)
	var jobs []string
	for i, tr := range uiHolders(pool) {
		jobs = append(jobs, uiCell(tr, "owner"))
		assert.Equal(t, strconv.FormatInt(permits[0].Int("fence"), 10) == domAttr(tr, "data-fence") ||
			strconv.FormatInt(permits[1].Int("fence"), 10) == domAttr(tr, "data-fence"), true, "permit %d's fence", i)
	}
	assert.ElementsMatch(t, []string{"gpu-job-1", "gpu-job-2"}, jobs)
	semWaits := uiWaiting(pool)
	require.Len(t, semWaits, 1)
	assert.Equal(t, "gpu-job-3", domAttr(semWaits[0], "data-owner"))
	assert.Empty(t, domAttr(semWaits[0], "data-mode"), "a permit has no mode")
	uiSince(t, semWaits[0])
	if btn := domFind(pool, uiByClass("button", "force-release")); assert.NotNil(t, btn) {
		assert.Equal(t, "semaphore", domAttr(btn, "data-kind"))
	}

	// The top lists: the oldest hold first; the waits count as contention, the semaphore's marked.
	longest := domFindAll(domFind(dom, domByID("longest-held")), func(n *html.Node) bool { return n.Data == "li" })
	if assert.NotEmpty(t, longest, "longest-held list") {
		assert.Equal(t, "deploy.production", domAttr(longest[0], "data-lock"))
		assert.True(t, domHasClass(longest[0], "long-hold"))
	}
	assert.Contains(t, domText(domFind(dom, domByID("window"))), "this replica", "Most contended says whose counts it shows")
	contended := map[string]*html.Node{}
	for _, li := range domFindAll(domFind(dom, domByID("most-contended")), func(n *html.Node) bool { return n.Data == "li" }) {
		contended[domAttr(li, "data-lock")] = li
	}
	if assert.Contains(t, contended, "pool.gpu") {
		assert.Equal(t, "semaphore", domAttr(contended["pool.gpu"], "data-kind"))
		assert.NotNil(t, domFind(contended["pool.gpu"], uiByClass("span", "semaphore")), "marked as a semaphore")
	}
	if assert.Contains(t, contended, "orders.42") {
		assert.Equal(t, "lock", domAttr(contended["orders.42"], "data-kind"))
		assert.Nil(t, domFind(contended["orders.42"], uiByClass("span", "semaphore")))
	}

	// The elections: each leader with its value as text, fence, since, TTL left, and candidates.
	elections := uiEntries(dom, "election")
	leaders := uiHolders(elections["scheduler"])
	require.Len(t, leaders, 1)
	assert.Equal(t, "sched-1", uiCell(leaders[0], "owner"))
	assert.Equal(t, markupValue, uiCell(leaders[0], "value"), "the value is text, not markup")
	assert.Nil(t, domFind(dom, func(n *html.Node) bool { return domHasAttr(n, "onmouseover") }), "no element made of a value")
	assert.Nil(t, domFind(elections["scheduler"], func(n *html.Node) bool { return n.Data == "b" }), "no element made of a value")
	assert.Equal(t, strconv.FormatInt(sched.Int("fence"), 10), uiCell(leaders[0], "fence"))
	if tm := domFind(leaders[0], func(n *html.Node) bool { return n.Data == "time" }); assert.NotNil(t, tm, "since") {
		assert.Equal(t, sched.Str("since"), domAttr(tm, "datetime"))
	}
	assert.Regexp(t, `^(1m \d\ds|2m)$`, uiCell(leaders[0], "ttl"), "TTL left of a 120 s lease")
	// Its candidates, named as a lock's waiters are, with their arrival.
	assert.True(t, strings.HasPrefix(uiCell(leaders[0], "candidates"), "1 candidate"), "candidates cell: %q", uiCell(leaders[0], "candidates"))
	if cands := uiWaiting(elections["scheduler"]); assert.Len(t, cands, 1) {
		assert.Equal(t, "sched-2", domAttr(cands[0], "data-owner"))
		assert.Empty(t, domAttr(cands[0], "data-mode"), "a candidate has no mode")
		uiSince(t, cands[0])
	}
	assert.Equal(t, "true", domAttr(elections["scheduler"], "data-led"))
	cacheLeader := uiHolders(elections["cache.primary"])
	require.Len(t, cacheLeader, 1)
	assert.Equal(t, "cache-a", uiCell(cacheLeader[0], "owner"))
	assert.Equal(t, "10.0.9.1:6379", uiCell(cacheLeader[0], "value"))
	assert.Equal(t, "–", uiCell(cacheLeader[0], "candidates"))
	if btn := domFind(elections["cache.primary"], uiByClass("button", "force-release")); assert.NotNil(t, btn) {
		assert.Equal(t, "election", domAttr(btn, "data-kind"))
	}

	// A new value, from the election's stream: in the table and in the Live events panel, as text.
	const markupValue2 = `<script>alert("x")</script>`
	r = c.Do(http.MethodPut, "/elections/scheduler", testkit.TokenHeader(sched.Str("token")), uiValueBody(markupValue2))
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	dom = b.waitFor(uiTimeout, "scheduler's new value in the table and in the Live events panel", func(dom *html.Node) bool {
		tb := uiEntries(dom, "election")["scheduler"]
		return uiEvent(dom, "proclaimed", "scheduler", "") != nil && tb != nil && uiCell(uiHolders(tb)[0], "value") == markupValue2
	})
	proclaimed := uiEvent(dom, "proclaimed", "scheduler", strconv.FormatInt(sched.Int("fence"), 10))
	if assert.NotNil(t, proclaimed) {
		assert.Equal(t, "stream", domAttr(proclaimed, "data-source"))
		assert.Equal(t, markupValue2, domAttr(proclaimed, "data-value"))
		assert.Contains(t, domText(proclaimed), markupValue2)
		assert.Equal(t, "election", domAttr(proclaimed, "data-kind"))
	}
	assert.Len(t, uiEvents(dom, "proclaimed", "scheduler", ""), 1, "the listing that shows the new value does not log it again")
	assert.Nil(t, domFind(dom, func(n *html.Node) bool { return n.Data == "script" && strings.Contains(domText(n), "alert") }))

	// Live events. A lock nobody waits for and newer than the rest has no stream (4 at most over
	// HTTP/1.1, those with waiters first): its grant and its end come from comparing listings.
	fresh := c.Do(http.MethodPost, "/locks/events.fresh", nil, testkit.AcquireBody("newcomer", 60000))
	require.Equal(t, http.StatusCreated, fresh.Status, string(fresh.Body))
	freshFence := strconv.FormatInt(fresh.Int("fence"), 10)
	b.waitFor(uiTimeout, "events.fresh's grant in the Live events panel", func(dom *html.Node) bool {
		return uiEvent(dom, "granted", "events.fresh", freshFence) != nil
	})
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/events.fresh", testkit.TokenHeader(fresh.Str("token")), "").Status)
	dom = b.waitFor(uiTimeout, "events.fresh's end in the Live events panel", func(dom *html.Node) bool {
		return uiEvent(dom, "ended", "events.fresh", freshFence) != nil
	})
	granted := uiEvent(dom, "granted", "events.fresh", freshFence)
	assert.Equal(t, "listing", domAttr(granted, "data-source"))
	// In a 1400x1000 window the Live events panel and its newest event are in view unscrolled.
	var view struct {
		ScrollY, Width, Height, Top, Bottom, Left, Right float64
	}
	b.eval(`(() => { const r = document.querySelector("#events li").getBoundingClientRect();
		return {scrollY, width: innerWidth, height: innerHeight, top: r.top, bottom: r.bottom, left: r.left, right: r.right}; })()`, &view)
	assert.Zero(t, view.ScrollY)
	assert.True(t, view.Top >= 0 && view.Bottom <= view.Height && view.Left >= 0 && view.Right <= view.Width,
		"the newest live event is in view at 1400x1000 without scrolling: %+v", view)
	assert.Equal(t, "newcomer", domAttr(granted, "data-owner"))
	assert.Equal(t, "listing", domAttr(uiEvent(dom, "ended", "events.fresh", freshFence), "data-source"))

	// The screenshot, where a developer can look at it: with waiters, and events in the panel.
	uiScreenshot(t, b, dir, "ui-screenshot.png")

	// orders.42 has a waiter, so the page follows its stream: its release and hand-off come from
	// there, each once.
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/orders.42", testkit.TokenHeader(orders.Str("token")), "").Status)
	handed := testkit.Receive(t, ordersWaiter, 10*time.Second, "orders-worker-2's grant")
	require.Equal(t, http.StatusCreated, handed.Status, string(handed.Body))
	handedFence := strconv.FormatInt(handed.Int("fence"), 10)
	dom = b.waitFor(uiTimeout, "orders.42's hand-off in the Live events panel and its new holder in the table", func(dom *html.Node) bool {
		tb := uiEntries(dom, "lock")["orders.42"]
		return uiEvent(dom, "granted", "orders.42", handedFence) != nil && tb != nil &&
			uiCell(uiHolders(tb)[0], "owner") == "orders-worker-2"
	})
	for _, typ := range []string{"released", "granted"} {
		ev := uiEvent(dom, typ, "orders.42", "")
		if assert.NotNil(t, ev, typ) {
			assert.Equal(t, "stream", domAttr(ev, "data-source"), "orders.42 %s", typ)
		}
	}
	assert.Equal(t, "orders-worker-1", domAttr(uiEvent(dom, "released", "orders.42", strconv.FormatInt(orders.Int("fence"), 10)), "data-owner"))
	assert.Len(t, uiEvents(dom, "granted", "orders.42", handedFence), 1, "the listing that shows the new holder does not log its grant again")

	// scheduler's leader resigns: its candidate is elected, and the panel shows both from the stream.
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/elections/scheduler", testkit.TokenHeader(sched.Str("token")), "").Status)
	elected := testkit.Receive(t, schedWaiter, 10*time.Second, "sched-2's campaign")
	require.Equal(t, http.StatusCreated, elected.Status, string(elected.Body))
	electedFence := strconv.FormatInt(elected.Int("fence"), 10)
	dom = b.waitFor(uiTimeout, "scheduler's new leader in the Live events panel and in the table", func(dom *html.Node) bool {
		tb := uiEntries(dom, "election")["scheduler"]
		return uiEvent(dom, "elected", "scheduler", electedFence) != nil && tb != nil &&
			uiCell(uiHolders(tb)[0], "owner") == "sched-2"
	})
	for _, typ := range []string{"resigned", "elected"} {
		if ev := uiEvent(dom, typ, "scheduler", ""); assert.NotNil(t, ev, typ) {
			assert.Equal(t, "stream", domAttr(ev, "data-source"), "scheduler %s", typ)
		}
	}
	assert.Equal(t, "10.0.3.8:8080", domAttr(uiEvent(dom, "elected", "scheduler", electedFence), "data-value"))
	assert.Equal(t, "–", uiCell(uiHolders(uiEntries(dom, "election")["scheduler"])[0], "candidates"))

	// A permit given back: the semaphore's waiter gets it, and the panel says so.
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/semaphores/pool.gpu", testkit.TokenHeader(permits[0].Str("token")), "").Status)
	third := testkit.Receive(t, permitWaiter, 10*time.Second, "gpu-job-3's permit")
	require.Equal(t, http.StatusCreated, third.Status, string(third.Body))
	b.waitFor(uiTimeout, "gpu-job-3's permit in the Live events panel", func(dom *html.Node) bool {
		ev := uiEvent(dom, "granted", "pool.gpu", strconv.FormatInt(third.Int("fence"), 10))
		return ev != nil && domAttr(ev, "data-kind") == "semaphore"
	})
	assert.Empty(t, b.exceptionsSoFar(), "the page threw no exception")
}

// TestUIDashboardWithAuthInHeadlessChromium runs the dashboard against a gateway with
// LEASEGATE_AUTH_FILE: the page loads without a key and asks for one, shows the 401's detail for a
// wrong key and the 403's for a key without admin (once, though four listings answer it), works
// with an admin key (listings and an events stream, sent with Authorization), keeps the key across
// a reload of the tab, and forgets it on request. Its screenshot of the key form showing that 403
// goes to docs/ui-screenshot-auth.png when LEASEGATE_UI_SCREENSHOT=1.
func TestUIDashboardWithAuthInHeadlessChromium(t *testing.T) {
	t.Parallel()
	chromium := testkit.DebianTool(t, "chromium", "chromium", "chromium-browser")
	dir := t.TempDir()
	ps := testkit.Principals()
	authPath := filepath.Join(dir, "auth.json")
	require.NoError(t, os.WriteFile(authPath, testkit.AuthFile(ps), 0o600))
	e := testkit.NewEnv(t, map[string]string{"LEASEGATE_AUTH_FILE": authPath})
	c := e.Client
	ops := harness.Headers{"Authorization": "Bearer " + ps["ops"].Key}
	wait := newWaiters(t)

	page, err := http.Get(e.Gateway.URL + "/ui/app.js")
	require.NoError(t, err)
	page.Body.Close()
	assert.Equal(t, http.StatusOK, page.StatusCode, "the page's files need no key")
	assert.Equal(t, http.StatusUnauthorized, c.Do(http.MethodGet, "/locks", nil, "").Status, "its data does")

	held := c.Do(http.MethodPost, "/locks/orders.7", ops, testkit.AcquireBody("orders-worker-1", 120000))
	require.Equal(t, http.StatusCreated, held.Status, string(held.Body))
	waiter := wait.start(c, http.MethodPost, "/locks/orders.7", ops, testkit.WaitBody("orders-worker-2", 120000, 60000))
	harness.Eventually(t, 10*time.Second, "a waiter queued on orders.7", func() bool {
		return c.Do(http.MethodGet, "/locks/orders.7", ops, "").Int("waiters") == 1
	})

	b := newBrowser(t, chromium, dir)
	b.open(e.Gateway.URL + "/ui")
	keyForm := func(dom *html.Node) (shown bool, message string) {
		form := domFind(dom, domByID("auth"))
		return form != nil && !domHasAttr(form, "hidden"), domText(domFind(dom, domByID("auth-error")))
	}
	b.waitFor(uiTimeout, "the page asking for a key", func(dom *html.Node) bool {
		shown, msg := keyForm(dom)
		return uiState(dom) == "auth" && shown && strings.Contains(msg, "401") && strings.Contains(msg, "send Authorization: Bearer")
	})

	b.giveKey("lgk_not-a-key")
	dom := b.waitFor(uiTimeout, "the wrong key's 401 detail", func(dom *html.Node) bool {
		shown, msg := keyForm(dom)
		return uiState(dom) == "auth" && shown && strings.Contains(msg, "401") && strings.Contains(msg, "not known")
	})
	assert.Empty(t, uiEntries(dom, "lock"), "nothing listed")

	// A key without the admin permission: the 403's detail, once (each listing answers it, and it
	// shows in the key form, not again in the status line), and a way to give another key.
	b.giveKey(ps["inspect-only"].Key)
	dom = b.waitFor(uiTimeout, "the 403 detail of a key without admin", func(dom *html.Node) bool {
		shown, msg := keyForm(dom)
		return uiState(dom) == "error" && shown && strings.Contains(msg, `lacks the "admin" permission`)
	})
	_, msg := keyForm(dom)
	assert.Equal(t, 1, strings.Count(msg, "403"), "the 403 said once: %q", msg)
	for _, call := range []string{"GET /locks", "GET /semaphores", "GET /admin/top", "GET /elections"} {
		assert.Contains(t, msg, call, "the calls it answered")
	}
	assert.Empty(t, domText(domFind(dom, domByID("status"))), "not in the status line too")
	uiScreenshot(t, b, dir, "ui-screenshot-auth.png")
	assert.False(t, domHasAttr(domFind(dom, domByID("key-state")), "hidden"), "the Forget key button shows")
	b.click("forget-key")
	b.waitFor(uiTimeout, "the key form again", func(dom *html.Node) bool {
		shown, _ := keyForm(dom)
		return uiState(dom) == "auth" && shown
	})

	b.giveKey(ps["ops"].Key)
	ready := func(what string) *html.Node {
		return b.waitFor(uiTimeout, what, func(dom *html.Node) bool {
			shown, _ := keyForm(dom)
			tb := uiEntries(dom, "lock")["orders.7"]
			return uiState(dom) == "ready" && !shown && tb != nil && domAttr(tb, "data-live") == "true"
		})
	}
	dom = ready("the page listing orders.7 and following its stream with the admin key")
	assert.Empty(t, domText(domFind(dom, domByID("status"))))
	tb := uiEntries(dom, "lock")["orders.7"]
	assert.Equal(t, "orders-worker-1", uiCell(uiHolders(tb)[0], "owner"))
	if w := uiWaiting(tb); assert.Len(t, w, 1) {
		assert.Equal(t, "orders-worker-2", domAttr(w[0], "data-owner"))
	}
	var kept string
	b.eval(`sessionStorage.getItem("leasegate.api-key")`, &kept)
	assert.Equal(t, ps["ops"].Key, kept, "the key is kept for the tab")

	// The stream was opened with the key: the hand-off shows from it.
	require.Equal(t, http.StatusOK, c.Do(http.MethodDelete, "/locks/orders.7", harness.Headers{
		"Authorization": ops["Authorization"], "Lease-Token": held.Str("token")}, "").Status)
	handed := testkit.Receive(t, waiter, 10*time.Second, "orders-worker-2's grant")
	require.Equal(t, http.StatusCreated, handed.Status, string(handed.Body))
	dom = b.waitFor(uiTimeout, "the hand-off in the Live events panel", func(dom *html.Node) bool {
		return uiEvent(dom, "granted", "orders.7", strconv.FormatInt(handed.Int("fence"), 10)) != nil
	})
	assert.Equal(t, "stream", domAttr(uiEvent(dom, "granted", "orders.7", ""), "data-source"))

	// A reload keeps the key (the tab's sessionStorage); Forget key drops it.
	b.eval(`document.body.dataset.old = "true"`, nil) // gone once the page is loaded again
	b.do("Page.reload", nil)
	b.waitFor(uiTimeout, "the reloaded page, without asking again", func(dom *html.Node) bool {
		shown, _ := keyForm(dom)
		body := domFind(dom, func(n *html.Node) bool { return n.Data == "body" })
		return !domHasAttr(body, "data-old") && uiState(dom) == "ready" && !shown && uiEntries(dom, "lock")["orders.7"] != nil
	})
	b.click("forget-key")
	b.waitFor(uiTimeout, "the key form after Forget key", func(dom *html.Node) bool {
		shown, msg := keyForm(dom)
		return uiState(dom) == "auth" && shown && strings.Contains(msg, "401")
	})
	b.eval(`sessionStorage.getItem("leasegate.api-key") ?? "(none)"`, &kept)
	assert.Equal(t, "(none)", kept, "the key is forgotten")
	assert.Empty(t, b.exceptionsSoFar(), "the page threw no exception")
}

// uiCampaignBody is a campaign's body with a 120 s lease, waiting up to waitMs.
func uiCampaignBody(owner, value string, waitMs int64) string {
	b, _ := json.Marshal(map[string]any{"owner": owner, "value": value, "ttl_ms": 120000, "wait_ms": waitMs})
	return string(b)
}

// uiValueBody is a proclaim's body.
func uiValueBody(value string) string {
	b, _ := json.Marshal(map[string]any{"value": value})
	return string(b)
}

// uiScreenshot takes a screenshot of the whole page, as wide as its viewport, into docs/ when
// LEASEGATE_UI_SCREENSHOT=1, else into dir, and checks it is one.
func uiScreenshot(t *testing.T, b *browser, dir, name string) {
	t.Helper()
	shot := filepath.Join(dir, name)
	if os.Getenv("LEASEGATE_UI_SCREENSHOT") == "1" {
		root, err := harness.ModuleRoot()
		require.NoError(t, err)
		shot = filepath.Join(root, "docs", name)
	}
	height := b.screenshot(shot)
	f, err := os.Open(shot)
	require.NoError(t, err, "no screenshot")
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, "the screenshot is a PNG")
	assert.Equal(t, b.width, img.Bounds().Dx())
	assert.Equal(t, height, img.Bounds().Dy())
	st, err := f.Stat()
	require.NoError(t, err)
	assert.Greater(t, st.Size(), int64(20000), "a page with content, not a blank one")
	t.Logf("screenshot: %s (%d bytes, %dx%d)", shot, st.Size(), b.width, height)
}

// uiState is the page's data-state: loading, ready, error or auth.
func uiState(dom *html.Node) string {
	return domAttr(domFind(dom, func(n *html.Node) bool { return n.Data == "body" }), "data-state")
}

// uiEntries returns the page's entries of kind ("lock" or "semaphore"), by name: one tbody each.
func uiEntries(dom *html.Node, kind string) map[string]*html.Node {
	out := map[string]*html.Node{}
	for _, tb := range domFindAll(dom, func(n *html.Node) bool {
		return n.Data == "tbody" && domHasClass(n, "entry") && domAttr(n, "data-kind") == kind
	}) {
		out[domAttr(tb, "data-name")] = tb
	}
	return out
}

// uiHolders returns an entry's holder rows.
func uiHolders(entry *html.Node) []*html.Node {
	return domFindAll(entry, func(n *html.Node) bool {
		return n.Data == "tr" && domHasClass(n, "holder") && domAttr(n, "data-fence") != ""
	})
}

// uiWaiting returns an entry's listed waiters.
func uiWaiting(entry *html.Node) []*html.Node {
	list := domFind(entry, uiByClass("ol", "waiters"))
	return domFindAll(list, func(n *html.Node) bool { return n.Data == "li" && domAttr(n, "data-owner") != "" })
}

// uiSince checks a listed waiter shows since when it waits: an arrival in the last minute, and
// how long ago.
func uiSince(t *testing.T, waiter *html.Node) {
	t.Helper()
	since, err := time.Parse(time.RFC3339Nano, domAttr(waiter, "data-since"))
	if assert.NoError(t, err, "data-since") {
		assert.WithinDuration(t, time.Now(), since, time.Minute)
	}
	tm := domFind(waiter, func(n *html.Node) bool { return n.Data == "time" })
	if assert.NotNil(t, tm, "a time element") {
		assert.Equal(t, domAttr(waiter, "data-since"), domAttr(tm, "datetime"))
	}
	assert.Contains(t, domText(waiter), "since ")
}

// uiCheckFenceDigits checks a holder row's fence cell: the row's fence, in groups of three digits
// (the first one to three), the dimmed ones ("same") leading.
func uiCheckFenceDigits(t *testing.T, name string, tr *html.Node) {
	t.Helper()
	fence := domAttr(tr, "data-fence")
	assert.Equal(t, fence, uiCell(tr, "fence"), "%s: the cell's text is the bare fence", name)
	groups := domFindAll(domFind(tr, uiByClass("td", "fence")), uiByClass("span", "g"))
	if !assert.Len(t, groups, (len(fence)+2)/3, "%s: fence %s in groups of three digits", name, fence) {
		return
	}
	dimmed := true
	for i, g := range groups {
		assert.True(t, len(domText(g)) == 3 || i == 0 && len(domText(g)) > 0, "%s: group %d of %s is %q", name, i, fence, domText(g))
		if !domHasClass(g, "same") {
			dimmed = false
		} else {
			assert.True(t, dimmed, "%s: the dimmed groups of %s lead", name, fence)
		}
	}
}

// uiCell is the text of a row's cell of class.
func uiCell(tr *html.Node, class string) string {
	return domText(domFind(tr, uiByClass("td", class)))
}

// uiEvents returns the Live events panel's entries of type about name, with fence unless "".
func uiEvents(dom *html.Node, typ, name, fence string) []*html.Node {
	return domFindAll(domFind(dom, domByID("events")), func(n *html.Node) bool {
		return n.Data == "li" && domAttr(n, "data-event") == typ && domAttr(n, "data-name") == name &&
			(fence == "" || domAttr(n, "data-fence") == fence)
	})
}

func uiEvent(dom *html.Node, typ, name, fence string) *html.Node {
	if evs := uiEvents(dom, typ, name, fence); len(evs) > 0 {
		return evs[0]
	}
	return nil
}

func uiByClass(tag, class string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Data == tag && domHasClass(n, class) }
}

func domHasAttr(n *html.Node, key string) bool {
	if n == nil {
		return false
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
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
