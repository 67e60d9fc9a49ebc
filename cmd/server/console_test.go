package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sharelog/sharelog/gen/openapi"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The console's browser tests: headless Chromium against the real server
// (this test binary re-executed as the server's main, as the other tests
// here do), driven through the pages as a person would.

// chromiumPath finds a Chromium. Without one the tests skip, except under
// CI, where a missing browser is a failure (.ci/install-chromium installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium binary on PATH under CI: .ci/install-chromium should have installed it")
	}
	t.Skip("no chromium binary on PATH (apt-get install chromium); CI runs these tests")
	return ""
}

// browser is one headless Chromium tab plus every request it sent.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	reqs []browserReq
}

type browserReq struct {
	method, url, auth string
	status            int64
	id                network.RequestID
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelC(); cancelA() })
	b := &browser{ctx: ctx}
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			auth, _ := e.Request.Headers["Authorization"].(string)
			b.reqs = append(b.reqs, browserReq{method: e.Request.Method, url: e.Request.URL, auth: auth, id: e.RequestID})
		case *network.EventResponseReceived:
			b.setStatus(e.RequestID, e.Response.Status)
		case *network.EventLoadingFailed:
			b.setStatus(e.RequestID, -1) // no answer (cancelled by a navigation, say)
		}
	}))
	return b
}

// stepTimeout bounds one step: generous, since CI runs every package's
// tests with -race on two cores while Chromium renders; a step that
// succeeds takes well under a second.
const stepTimeout = 30 * time.Second

// run runs actions with a deadline, so a page that never shows what a step
// waits for fails the test instead of hanging it.
func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		defer cancel()
		text, _ := chromedp.Run(tctx, evaluate[string]("document.body.innerText"))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, text)
	}
}

// value runs a that returns a value, within the same deadline.
func value[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(t, err, what)
	return v
}

// void drops an action's value, to run it among other steps.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, tg)
		return chromedp.Void{}, err
	}
}

func evaluate[T any](js string) chromedp.Action[T] { return chromedp.Evaluate[T](js) }

func poll(js string) chromedp.Action[chromedp.Void] {
	return void(chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond)))
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// setStatus records a request's outcome: the HTTP status, or -1 when it
// got no answer. b.mu is held.
func (b *browser) setStatus(id network.RequestID, status int64) {
	for i := len(b.reqs) - 1; i >= 0; i-- {
		if b.reqs[i].id == id {
			if b.reqs[i].status == 0 {
				b.reqs[i].status = status
			}
			return
		}
	}
}

// settled returns the requests once every one of them has an outcome.
func (b *browser) settled(t *testing.T) []browserReq {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, r := range b.requests() {
			if r.status == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "requests without an outcome")
	return b.requests()
}

func (b *browser) requests() []browserReq {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]browserReq(nil), b.reqs...)
}

// waitText waits until the element sel's text contains want.
func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	return poll(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.innerText.includes(%q); })()`, sel, want))
}

// waitNoText waits until sel exists and its text does not contain gone.
func waitNoText(sel, gone string) chromedp.Action[chromedp.Void] {
	return poll(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && !e.innerText.includes(%q); })()`, sel, gone))
}

// setValue sets a form control's value and fires its change event.
func setValue(sel, v string) chromedp.Action[chromedp.Void] {
	return void(chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q; e.dispatchEvent(new Event('input')); e.dispatchEvent(new Event('change')); return true; })()`, sel, v)))
}

// screenshots writes each page at a desktop and a phone viewport: into
// docs/console/ when SHARELOG_CONSOLE_SCREENSHOTS is set (make
// console-screenshots), into a temporary directory otherwise.
type shooter struct {
	dir string
}

func newShooter(t *testing.T) *shooter {
	if os.Getenv("SHARELOG_CONSOLE_SCREENSHOTS") != "" {
		dir, err := filepath.Abs("../../docs/console")
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return &shooter{dir: dir}
	}
	return &shooter{dir: t.TempDir()}
}

var viewports = []struct {
	name          string
	width, height int64
	mobile        bool
}{{"desktop", 1280, 800, false}, {"phone", 390, 844, true}}

// a11yProblems lists what a screen-reader or keyboard user would miss on
// the page shown: form controls without a label, buttons and links without
// a name, a page without exactly one h1 (an open dialog without a heading),
// tables without a caption or column headers, charts without a label and a
// text caption.
const a11yProblems = `(() => {
  const out = [];
  const visible = (e) => !e.closest('[hidden]') && !e.closest('dialog:not([open])');
  for (const e of document.querySelectorAll('input, select, textarea')) {
    if (visible(e) && e.type !== 'hidden' && !e.labels.length && !e.getAttribute('aria-label')) out.push('unlabelled ' + e.outerHTML.slice(0, 80));
  }
  for (const e of document.querySelectorAll('button, a[href]')) {
    if (visible(e) && !e.innerText.trim() && !e.getAttribute('aria-label')) out.push('nameless ' + e.outerHTML.slice(0, 80));
  }
  const h1 = [...document.querySelectorAll('main h1')].length;
  const modal = document.querySelector('dialog[open]');
  if (modal && !modal.querySelector('h1, h2')) out.push('dialog without heading');
  if (!modal && h1 !== 1) out.push(h1 + ' h1 elements in main');
  for (const t of document.querySelectorAll('main table')) {
    if (t.closest('[aria-hidden=true]')) continue;
    if (!t.caption || !t.caption.innerText.trim()) out.push('table without caption');
    if (!t.querySelector('thead th[scope=col]')) out.push('table without column headers');
  }
  for (const f of document.querySelectorAll('main figure')) if (!f.getAttribute('aria-label') || !f.querySelector('figcaption')) out.push('figure without label or caption');
  return out;
})()`

// checkA11y fails the test for each problem a11yProblems finds on the page.
func checkA11y(t *testing.T, b *browser, page string) {
	t.Helper()
	problems := value(t, b, "accessibility of "+page, evaluate[[]string](a11yProblems))
	assert.Empty(t, problems, "accessibility problems on %s", page)
}

func (s *shooter) shoot(t *testing.T, b *browser, name string, ready chromedp.Action[chromedp.Void]) {
	t.Helper()
	b.run(t, "ready "+name, ready)
	checkA11y(t, b, name)
	for _, v := range viewports {
		vp := chromedp.EmulateViewport(v.width, v.height)
		if v.mobile {
			vp = chromedp.EmulateViewport(v.width, v.height, chromedp.EmulateMobile)
		}
		// Wait for the page, then for layout at the new size (two frames).
		b.run(t, "screenshot "+name+" "+v.name, vp, void(evaluate[bool](`(window.scrollTo(0, 0), true)`)), ready,
			void(chromedp.Evaluate[bool](`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise)))
		png := value(t, b, "capture "+name, chromedp.CaptureScreenshot())
		require.NoError(t, os.WriteFile(filepath.Join(s.dir, name+"-"+v.name+".png"), png, 0o644))
	}
	b.run(t, "desktop viewport", chromedp.EmulateViewport(1280, 800))
}

// publicRoutes matches the request paths of the OpenAPI document's routes.
func publicRoutes(t *testing.T) []*regexp.Regexp {
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openapi.JSON, &doc))
	var out []*regexp.Regexp
	param := regexp.MustCompile(`\\\{[^}]*\\\}`)
	for p := range doc.Paths {
		out = append(out, regexp.MustCompile("^"+param.ReplaceAllString(regexp.QuoteMeta(p), `[^/]+`)+"$"))
	}
	require.NotEmpty(t, out)
	return out
}

// checkOnlyPublic asserts every request the console sent to the server is
// one of its files or a public API route.
func checkOnlyPublic(t *testing.T, b *browser, base string, minCalls int) {
	t.Helper()
	routes := publicRoutes(t)
	n := 0
	for _, r := range b.requests() {
		u, err := url.Parse(r.url)
		require.NoError(t, err)
		if u.Scheme == "data" {
			continue // the browser's own inline images (form control icons), not a request
		}
		if u.Scheme+"://"+u.Host != base {
			assert.Fail(t, "request to another origin", "%s %s", r.method, r.url)
			continue
		}
		if strings.HasPrefix(u.Path, "/ui/") {
			continue
		}
		n++
		ok := false
		for _, re := range routes {
			if re.MatchString(u.EscapedPath()) {
				ok = true
				break
			}
		}
		assert.True(t, ok, "%s %s is not a public API route", r.method, u.Path)
	}
	assert.GreaterOrEqual(t, n, minCalls, "the console made API calls")
}

func TestConsoleBrowser(t *testing.T) {
	b := newBrowser(t)
	c := startChild(t, t.TempDir(), "--fsync", "never")
	base := "http://" + c.httpAddr
	shots := newShooter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := sharelogv1.NewLogServiceClient(c.conn)
	groups := sharelogv1.NewShareGroupServiceClient(c.conn)

	// Create a topic through the topics page.
	b.run(t, "open topics", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(css("#create-topic")),
		setValue("#create-topic input[name=name]", "orders"), setValue("#create-topic input[name=partitions]", "2"),
		chromedp.Click(css("#create-topic button")), waitText("main table", "orders"), waitText("#status", "Topic orders created"))

	// Produce through the topic page's form: keyed JSON values to partition 0.
	b.run(t, "open topic", chromedp.Click(css(`main table a[href="#/topics/orders"]`)), chromedp.WaitVisible(css("#produce")))
	for i := range 3 {
		b.run(t, "produce", setValue("#produce select", "0"), setValue("#produce input[name=key]", fmt.Sprintf("order-%d", i)),
			setValue("#produce input[name=value]", fmt.Sprintf(`{"n":%d,"item":"book"}`, i)),
			setValue("#produce input[name=headers]", map[bool]string{true: "src=ui, trace=a=b"}[i == 0]), chromedp.Click(css("#produce button")),
			waitText("#status", fmt.Sprintf("Produced to partition 0 at offset %d.", i)))
	}
	// The page reloaded after each produce and kept the partition picked.
	b.run(t, "partition kept", poll(`document.querySelector("#produce select").value === "0"`))
	// More through the API, as a running producer would.
	recs := make([]*sharelogv1.Record, 7)
	for i := range recs {
		recs[i] = &sharelogv1.Record{Key: []byte(fmt.Sprintf("order-%d", i+3)), Value: []byte(fmt.Sprintf(`{"n":%d,"item":"pen"}`, i+3))}
	}
	_, err := logs.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "orders", Partition: proto.Int32(0), Records: recs})
	require.NoError(t, err)
	_, err = logs.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "orders", Partition: proto.Int32(1), Records: []*sharelogv1.Record{
		{Key: []byte("user-1"), Value: []byte(`{"name":"Ada"}`)}, {Key: []byte("user-2"), Value: []byte(`{"name":"Grace"}`)}, {Key: []byte("user-1")}}})
	require.NoError(t, err)
	b.run(t, "reload topic", chromedp.Reload(), waitText("main table", "10"))
	shots.shoot(t, b, "topic", waitText("main table", "10"))
	b.run(t, "topics again", chromedp.Click(css(`a[data-nav=topics]`)), waitText("main table", "13"))
	shots.shoot(t, b, "topics", waitText("main table", "13"))
	b.run(t, "back to the topic", chromedp.Click(css(`main table a[href="#/topics/orders"]`)), waitText("main table", "10"))

	// Browse records from offset 0, then as JSON, then from a timestamp.
	b.run(t, "browse", chromedp.Click(css(`main table a[href^="#/records"]`)), chromedp.WaitVisible(css("#browse")),
		chromedp.Click(css("#browse button")), waitText("main table", `{"n":0,"item":"book"}`), waitText("main table", "order-9"),
		waitText("main table", "src=ui, trace=a=b"))
	// Every partition at once, a page at a time, and a search by key.
	b.run(t, "all partitions", setValue("#browse select[name=partition]", "all"), setValue("#browse input[name=max]", "4"),
		chromedp.Click(css("#browse button")), waitText("caption", "all partitions"), waitText("main table", "order-0"),
		poll(`document.querySelectorAll('main tbody tr').length === 4`))
	b.run(t, "next page", void(evaluate[bool](`(document.getElementById('records-newer').click(), true)`)), waitNoText("main table", "order-0"),
		poll(`document.querySelectorAll('main tbody tr').length === 4`))
	b.run(t, "previous page", void(evaluate[bool](`(document.getElementById('records-older').click(), true)`)), waitText("main table", "order-0"))
	b.run(t, "search by key", setValue("#browse input[name=key]", "user-"), chromedp.Click(css("#browse button")),
		waitText("main table", "user-2"), waitNoText("main table", "order-"),
		poll(`document.querySelectorAll('main tbody tr').length === 3`))
	b.run(t, "one partition again", setValue("#browse input[name=key]", ""), setValue("#browse select[name=partition]", "0"),
		setValue("#browse input[name=max]", "50"), chromedp.Click(css("#browse button")), waitText("main table", "order-9"))
	b.run(t, "browse as JSON", setValue("#browse select[name=format]", "json"),
		waitText("main table", "\"item\": \"pen\""))
	b.run(t, "browse hex", setValue("#browse select[name=format]", "hex"),
		waitText("main table", "7b 22 6e 22"))
	b.run(t, "browse by timestamp", setValue("#browse select[name=format]", "json"),
		setValue("#browse select[name=from]", "timestamp"),
		setValue("#browse input[name=timestamp]", time.Now().Add(-time.Hour).UTC().Format("2006-01-02T15:04:05")),
		chromedp.Click(css("#browse button")), waitText("main table", `"n": 0`))
	shots.shoot(t, b, "records", waitText("main table", `"n": 0`))

	// A consumer acquires records; the group page shows them in flight,
	// held by the consumer, then settled once it acknowledges.
	_, err = groups.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "billing",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
	require.NoError(t, err)
	hb, err := groups.ShareGroupHeartbeat(ctx, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "billing", MemberId: "worker-1", SubscribedTopicNames: []string{"orders"}})
	require.NoError(t, err)
	fetch := func(epoch int32, max int32, acks ...*sharelogv1.AcknowledgementBatch) *sharelogv1.ShareFetchResponse {
		t.Helper()
		res, err := groups.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "billing", MemberId: "worker-1", ShareSessionEpoch: epoch,
			MaxRecords: proto.Int32(max), Topics: []*sharelogv1.ShareFetchTopic{{Topic: "orders", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0, AcknowledgementBatches: acks}}}}})
		require.NoError(t, err)
		return res
	}
	res := fetch(0, 4)
	require.Equal(t, int64(3), res.Responses[0].Partitions[0].AcquiredRecords[0].LastOffset, "four records acquired")
	b.run(t, "group page", chromedp.Click(css(`a[data-nav=groups]`)), waitText("main table", "billing"),
		chromedp.Click(css(`main table a[href="#/groups/billing"]`)),
		waitText("#inflight", "ACQUIRED"), waitText("#inflight", "worker-1"), waitText("#inflight", "0–3"))
	b.run(t, "members", waitText("main", hb.GetMemberId()))
	// Accept 0..1, release 2..3: the page follows (released records are AVAILABLE, delivered once).
	fetch(1, 2, &sharelogv1.AcknowledgementBatch{FirstOffset: 0, LastOffset: 1, AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}},
		&sharelogv1.AcknowledgementBatch{FirstOffset: 2, LastOffset: 3, AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE}})
	// The release made 2..3 AVAILABLE and the same fetch acquired 2 records again (2..3, second delivery).
	b.run(t, "in-flight changes", waitText("#inflight", "2–3"), waitNoText("#inflight", "0–3"),
		poll(`[...document.querySelectorAll('#inflight tbody tr')].some(r => r.innerText.includes('2–3') && r.innerText.includes('ACQUIRED') && r.cells[4].innerText === '2')`),
		waitText("main", "SPSO"))
	// Reject 3 (2 stays acquired): 3 is ARCHIVED, whose delivery count the
	// server does not keep — shown as such, not as 0 deliveries.
	fetch(2, 1, &sharelogv1.AcknowledgementBatch{FirstOffset: 3, LastOffset: 3, AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_REJECT}})
	b.run(t, "archived record", waitText("#inflight", "ARCHIVED"),
		poll(`[...document.querySelectorAll('#inflight tbody tr')].some(r => r.innerText.includes('ARCHIVED') && r.cells[4].innerText === '–')`),
		poll(`![...document.querySelectorAll('#inflight tbody tr')].some(r => r.innerText.includes('ARCHIVED') && r.cells[4].innerText === '0')`))
	// Edit the configuration: only the changed field is sent.
	b.run(t, "edit config", setValue("#group-config input[name=deliveryCountLimit]", "7"), chromedp.Click(css("#group-config button")),
		waitText("#status", "Configuration saved: deliveryCountLimit."))
	cfg, err := groups.GetShareGroupConfig(ctx, &sharelogv1.GetShareGroupConfigRequest{GroupId: "billing"})
	require.NoError(t, err)
	assert.Equal(t, int32(7), cfg.GetConfig().GetDeliveryCountLimit())
	assert.Equal(t, "earliest", cfg.GetConfig().GetAutoOffsetReset())
	// A reset is previewed first; cancelled, nothing is sent.
	b.run(t, "reset preview", setValue("#reset-offsets input[name=start_offset]", "0"), chromedp.Click(css("#reset-offsets button")),
		chromedp.WaitVisible(css("#confirm-cancel")), waitText("#confirm-text", "Dry run: orders/0 start offset 2 → 0"),
		waitText("#confirm-text", "The group has members"), chromedp.Click(css("#confirm-cancel")), chromedp.WaitNotVisible(css("#confirm")))
	b.run(t, "chart text", waitText("#main figure figcaption", "records behind"))
	shots.shoot(t, b, "share-group", waitText("#inflight", "ACQUIRED"))
	shots.shoot(t, b, "share-group-inflight", chromedp.Steps(waitText("#inflight", "ACQUIRED"),
		void(evaluate[bool](`(document.getElementById('inflight').previousElementSibling.scrollIntoView(), true)`))))
	b.run(t, "groups list", chromedp.Navigate(base+"/ui/#/groups"), waitText("main table", "billing"))
	shots.shoot(t, b, "share-groups", waitText("main table", "billing"))

	// Purge partition 0 below offset 2 through the topic page, confirmed.
	b.run(t, "purge", chromedp.Navigate(base+"/ui/#/topics/orders"), chromedp.WaitVisible(css("#purge")),
		setValue("#purge select", "0"), setValue("#purge input[name=offset]", "2"),
		chromedp.Click(css("#purge button")), chromedp.WaitVisible(css("#confirm-ok")),
		chromedp.Click(css("#confirm-ok")), waitText("#status", "log start is now 2"))
	d, err := logs.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "orders"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Partitions[0].LogStartOffset)
	// Cancelling the confirmation purges nothing.
	b.run(t, "purge cancelled", setValue("#purge input[name=offset]", "5"), chromedp.Click(css("#purge button")),
		chromedp.WaitVisible(css("#confirm-cancel")), chromedp.Click(css("#confirm-cancel")),
		chromedp.WaitNotVisible(css("#confirm")))
	d, err = logs.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "orders"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.Partitions[0].LogStartOffset)

	// Follow partition 1's change stream: the snapshot, then a live change.
	b.run(t, "changes", chromedp.Navigate(base+"/ui/#/changes?topic=orders&partition=1"), chromedp.WaitVisible(css("#changes-form")),
		chromedp.Click(css("#follow")), waitText("#events", "Grace"), waitText("#events", "deletion"))
	_, err = logs.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "orders", Partition: proto.Int32(1), Records: []*sharelogv1.Record{
		{Key: []byte("user-3"), Value: []byte(`{"name":"Barbara"}`)}}})
	require.NoError(t, err)
	b.run(t, "live change", waitText("#events", "Barbara"))
	shots.shoot(t, b, "change-stream", waitText("#events", "Barbara"))
	b.run(t, "stop", chromedp.Click(css("#stop")), waitText("#stream-state", "Stopped"))
	// A key prefix: only user-2's change.
	b.run(t, "prefix", setValue("#changes-form input[name=key_prefix]", "user-2"), chromedp.Click(css("#follow")),
		waitText("#events", "Grace"), waitNoText("#events", "Ada"), waitNoText("#events", "Barbara"),
		chromedp.Click(css("#stop")), waitText("#stream-state", "Stopped"))

	// The keyboard alone: Tab reaches the skip link first, then the
	// navigation; a form submits with Enter.
	b.run(t, "keyboard", chromedp.Navigate(base+"/ui/#/topics"), chromedp.WaitVisible(css("#create-topic")),
		chromedp.Reload(), chromedp.WaitVisible(css("#create-topic")), chromedp.KeyEvent("\t"),
		poll(`document.activeElement.innerText === 'Skip to content'`), chromedp.KeyEvent("\t\t"),
		poll(`document.activeElement.innerText === 'Topics'`),
		chromedp.Focus(css("#create-topic input[name=name]")), chromedp.KeyEvent("typed\r"), waitText("main table", "typed"))

	// Delete that topic: the button stays disabled until its name is typed.
	b.run(t, "delete topic", chromedp.Click(css(`main table a[href="#/topics/typed"]`)), chromedp.WaitVisible(css("#delete-topic")),
		chromedp.Click(css("#delete-topic")), chromedp.WaitVisible(css("#confirm-input")),
		poll(`document.getElementById('confirm-ok').disabled`), setValue("#confirm-input", "type"),
		poll(`document.getElementById('confirm-ok').disabled`), setValue("#confirm-input", "typed"),
		poll(`!document.getElementById('confirm-ok').disabled`), chromedp.Click(css("#confirm-ok")),
		waitText("#status", "Topic typed deleted."), waitText("main table", "orders"), waitNoText("main table", "typed"))
	_, err = logs.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "typed"})
	require.Error(t, err, "the topic is gone")

	checkOnlyPublic(t, b, base, 20)
}

// With tokens on, the console asks for one before any data is shown, keeps
// it in sessionStorage only, and sends it with every API call.
func TestConsoleBrowserAuth(t *testing.T) {
	b := newBrowser(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("s3cret-console\n"), 0o600))
	c := startChild(t, t.TempDir(), "--fsync", "never", "--auth-tokens-file", tokens)
	base := "http://" + c.httpAddr
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret-console")
	_, err := sharelogv1.NewLogServiceClient(c.conn).CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "secret-topic", Partitions: 1})
	require.NoError(t, err)

	for _, page := range []string{"#/topics", "#/topics/secret-topic", "#/groups", "#/groups/g", "#/records?topic=secret-topic"} {
		b.run(t, "open "+page, chromedp.Navigate(base+"/ui/"+page), chromedp.WaitVisible(css("#login")),
			waitNoText("main", "secret-topic"))
	}
	n401 := 0
	for _, r := range b.settled(t) {
		if strings.Contains(r.url, "/v1/") {
			assert.Empty(t, r.auth, "%s sent a token before one was given", r.url)
			// 401, or no answer at all (a request the next navigation cancelled).
			assert.Contains(t, []int64{401, -1}, r.status, "%s answered without a token", r.url)
			if r.status == 401 {
				n401++
			}
		}
	}
	assert.GreaterOrEqual(t, n401, 4, "the pages tried the API and were refused")
	shots := newShooter(t)
	shots.shoot(t, b, "token", chromedp.WaitVisible(css("#login")))

	// A wrong token is refused and asked for again.
	b.run(t, "wrong token", chromedp.Navigate(base+"/ui/#/topics"), chromedp.WaitVisible(css("#token")),
		setValue("#token", "wrong"), chromedp.Click(css("#login-form button")),
		waitText("#login-error", "refused"), waitNoText("main", "secret-topic"))
	b.run(t, "right token", setValue("#token", "s3cret-console"), chromedp.Click(css("#login-form button")),
		waitText("main table", "secret-topic"))
	session := value(t, b, "session storage", evaluate[string](`sessionStorage.getItem('sharelog.token') || ''`))
	local := value(t, b, "local storage", evaluate[string](`JSON.stringify(localStorage)`))
	assert.Equal(t, "s3cret-console", session)
	assert.Equal(t, "{}", local, "the token is not kept beyond the tab")
	last := b.requests()
	var sawOK bool
	for _, r := range last {
		if strings.Contains(r.url, "/v1/topics") && r.status == 200 {
			sawOK = true
			assert.Equal(t, "Bearer s3cret-console", r.auth)
		}
	}
	assert.True(t, sawOK)
	checkOnlyPublic(t, b, base, 5)
}
