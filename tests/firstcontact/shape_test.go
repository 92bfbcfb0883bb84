package firstcontact

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// shapeChecker compares what a documented command printed with what the documentation shows,
// in shape: the same lines, status lines and the headers shown, JSON with the same fields, and the
// same values where a run cannot change them. What varies from run to run is checked for its kind
// and its relations: a fence is a number, the same shown fence is the same fence each time, and
// fences are in the order shown (so a fence that the block shows changing must change, and one
// that it shows kept must be kept); ids (multi-locks', events') likewise; times are RFC 3339; TTLs
// left are within 2 s of the one shown; a problem's detail is the same once numbers and UUIDs are
// masked. It keeps those relations across the commands of one transcript.
type shapeChecker struct {
	fences [][2]int64        // shown, printed
	ids    map[string]string // shown -> printed
	idsBy  map[string]string // printed -> shown
}

// output compares the output printed with the lines shown and returns what differs.
func (c *shapeChecker) output(shown []string, printed string) []string {
	got := strings.Split(strings.TrimRight(strings.ReplaceAll(printed, "\r", ""), "\n"), "\n")
	if len(got) == 1 && got[0] == "" {
		got = nil
	}
	if len(shown) > 0 && strings.HasPrefix(shown[0], "HTTP/") {
		return c.httpResponse(shown, got)
	}
	return c.lines(shown, got)
}

// lines compares line by line; a shown line "…" ends the comparison (the rest is not shown).
func (c *shapeChecker) lines(shown, got []string) []string {
	var problems []string
	for i, s := range shown {
		if s == "…" {
			return problems
		}
		if i >= len(got) {
			return append(problems, fmt.Sprintf("printed %d lines, the block shows %d", len(got), len(shown)))
		}
		problems = append(problems, c.line(s, got[i])...)
	}
	if len(got) > len(shown) {
		problems = append(problems, fmt.Sprintf("printed %d lines, the block shows %d; the first not shown: %q", len(got), len(shown), got[len(shown)]))
	}
	return problems
}

func (c *shapeChecker) line(shown, got string) []string {
	switch {
	case strings.HasPrefix(shown, "{"):
		return c.jsonText("", shown, got)
	case strings.HasPrefix(shown, "data: ") && strings.HasPrefix(got, "data: "):
		return c.jsonText("data", strings.TrimPrefix(shown, "data: "), strings.TrimPrefix(got, "data: "))
	case strings.HasPrefix(shown, "id: ") && strings.HasPrefix(got, "id: "):
		return c.id("event id", strings.TrimPrefix(shown, "id: "), strings.TrimPrefix(got, "id: "))
	case shown != got:
		return []string{fmt.Sprintf("printed %q, the block shows %q", got, shown)}
	}
	return nil
}

// httpResponse compares a response printed with its headers (curl -i): the status line, every
// header shown (others may be printed too), then the body's lines.
func (c *shapeChecker) httpResponse(shown, got []string) []string {
	split := func(ls []string) (head, body []string) {
		for i, l := range ls {
			if l == "" {
				return ls[:i], ls[i+1:]
			}
		}
		return ls, nil
	}
	shownHead, shownBody := split(shown)
	gotHead, gotBody := split(got)
	if len(gotHead) == 0 || gotHead[0] != shownHead[0] {
		return []string{fmt.Sprintf("printed the status line %q, the block shows %q", strings.Join(gotHead[:min(1, len(gotHead))], ""), shownHead[0])}
	}
	headers := map[string]string{}
	for _, h := range gotHead[1:] {
		k, v, _ := strings.Cut(h, ": ")
		headers[strings.ToLower(k)] = v
	}
	var problems []string
	for _, h := range shownHead[1:] {
		k, want, _ := strings.Cut(h, ": ")
		v, ok := headers[strings.ToLower(k)]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("no %s header, the block shows %q", k, h))
		case strings.EqualFold(k, "X-Request-Id"):
			if v == "" {
				problems = append(problems, "an empty X-Request-Id")
			}
		case strings.EqualFold(k, "Retry-After"):
			w, err1 := strconv.Atoi(want)
			g, err2 := strconv.Atoi(v)
			if err1 != nil || err2 != nil || g < w-2 || g > w+2 {
				problems = append(problems, fmt.Sprintf("Retry-After %q, the block shows %q", v, want))
			}
		case v != want:
			problems = append(problems, fmt.Sprintf("%s %q, the block shows %q", k, v, want))
		}
	}
	return append(problems, c.lines(shownBody, gotBody)...)
}

func (c *shapeChecker) jsonText(path, shown, got string) []string {
	decode := func(s string) (any, error) {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		if d.More() {
			return nil, fmt.Errorf("more after the value")
		}
		return v, nil
	}
	s, err := decode(shown)
	if err != nil {
		return []string{fmt.Sprintf("the block shows JSON that does not parse (%v): %s", err, shown)}
	}
	g, err := decode(got)
	if err != nil {
		return []string{fmt.Sprintf("printed %q, not the JSON the block shows (%v)", got, err)}
	}
	return c.value(path, "", s, g)
}

// value compares a JSON value printed (got) with the one shown, key being its member name.
func (c *shapeChecker) value(path, key string, shown, got any) []string {
	switch s := shown.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: printed %v, the block shows an object", path, got)}
		}
		var problems []string
		for _, k := range sortedKeys(s) {
			if _, ok := g[k]; !ok {
				problems = append(problems, fmt.Sprintf("%s: no member %q, the block shows it", path, k))
				continue
			}
			problems = append(problems, c.value(path+"."+k, k, s[k], g[k])...)
		}
		for _, k := range sortedKeys(g) {
			if _, ok := s[k]; !ok {
				problems = append(problems, fmt.Sprintf("%s: a member %q the block does not show (%v)", path, k, g[k]))
			}
		}
		return problems
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(s) {
			return []string{fmt.Sprintf("%s: printed %v, the block shows %d elements", path, got, len(s))}
		}
		byOwner(s)
		byOwner(g)
		var problems []string
		for i := range s {
			problems = append(problems, c.value(fmt.Sprintf("%s[%d]", path, i), key, s[i], g[i])...)
		}
		return problems
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return []string{fmt.Sprintf("%s: printed %v, the block shows a number", path, got)}
		}
		return c.number(path, key, s, g)
	case string:
		g, ok := got.(string)
		if !ok {
			return []string{fmt.Sprintf("%s: printed %v, the block shows a string", path, got)}
		}
		return c.text(path, key, s, g)
	default: // bool, null
		if shown != got {
			return []string{fmt.Sprintf("%s: printed %v, the block shows %v", path, got, shown)}
		}
	}
	return nil
}

func (c *shapeChecker) number(path, key string, shown, got json.Number) []string {
	s, err1 := shown.Int64()
	g, err2 := got.Int64()
	if err1 != nil || err2 != nil {
		if shown != got {
			return []string{fmt.Sprintf("%s: printed %s, the block shows %s", path, got, shown)}
		}
		return nil
	}
	switch key {
	case "fence", "fences":
		return c.fence(path, s, g)
	case "ttl_ms", "max_hold_ms", "max_hold_left_ms":
		if g < s-2000 || g > s+2000 {
			return []string{fmt.Sprintf("%s: printed %d, the block shows %d (2 s either way is the same)", path, g, s)}
		}
	case "retry_after_ms", "waited_ms", "age_ms":
		if g < 0 {
			return []string{fmt.Sprintf("%s: printed %d, a duration", path, g)}
		}
	default:
		if s != g {
			return []string{fmt.Sprintf("%s: printed %d, the block shows %d", path, g, s)}
		}
	}
	return nil
}

var (
	uuidText   = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	numberText = regexp.MustCompile(`\d+(\.\d+)?`)
)

func (c *shapeChecker) text(path, key, shown, got string) []string {
	switch key {
	case "token", "queue_ticket", "request_id":
		if got == "" {
			return []string{fmt.Sprintf("%s: printed an empty string", path)}
		}
	case "expires_at", "since", "at", "forced_at":
		if _, err := time.Parse(time.RFC3339Nano, got); err != nil {
			return []string{fmt.Sprintf("%s: printed %q, not an RFC 3339 time", path, got)}
		}
	case "id", "multilock", "event_id", "last_event_id":
		return c.id(path, shown, got)
	case "detail":
		mask := func(s string) string {
			return numberText.ReplaceAllString(uuidText.ReplaceAllString(s, "<uuid>"), "<n>")
		}
		if mask(shown) != mask(got) {
			return []string{fmt.Sprintf("%s: printed %q, the block shows %q", path, got, shown)}
		}
	default:
		if shown != got {
			return []string{fmt.Sprintf("%s: printed %q, the block shows %q", path, got, shown)}
		}
	}
	return nil
}

// id checks that the id printed stands for the one shown, one for one across the transcript.
func (c *shapeChecker) id(path, shown, got string) []string {
	if c.ids == nil {
		c.ids, c.idsBy = map[string]string{}, map[string]string{}
	}
	if g, ok := c.ids[shown]; ok && g != got {
		return []string{fmt.Sprintf("%s: printed %q where the block shows %q, which stood for %q before", path, got, shown, g)}
	}
	if s, ok := c.idsBy[got]; ok && s != shown {
		return []string{fmt.Sprintf("%s: printed %q, which stood for %q before, where the block shows %q", path, got, s, shown)}
	}
	c.ids[shown], c.idsBy[got] = got, shown
	return nil
}

// fence checks that the fence printed stands for the one shown, one for one and in the same
// order as every fence before it in the transcript.
func (c *shapeChecker) fence(path string, shown, got int64) []string {
	for _, f := range c.fences {
		if (f[0] < shown) != (f[1] < got) || (f[0] == shown) != (f[1] == got) {
			return []string{fmt.Sprintf("%s: printed the fence %d where the block shows %d; but the block shows %d before, printed as %d",
				path, got, shown, f[0], f[1])}
		}
	}
	c.fences = append(c.fences, [2]int64{shown, got})
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// byOwner sorts a list of holders by owner: two holders whose leases run out in the same
// millisecond are listed in either order.
func byOwner(list []any) {
	owner := func(v any) (string, bool) {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		s, ok := m["owner"].(string)
		return s, ok
	}
	for _, v := range list {
		if _, ok := owner(v); !ok {
			return
		}
	}
	sort.SliceStable(list, func(i, j int) bool {
		a, _ := owner(list[i])
		b, _ := owner(list[j])
		return a < b
	})
}
