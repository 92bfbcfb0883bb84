package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/leasegate/leasegate/api"
)

func TestCampaignRequestValidate(t *testing.T) {
	l := api.Limits{DefaultTTL: 30 * time.Second, MaxTTL: 10 * time.Minute, MaxWait: time.Minute, MaxHold: time.Hour}
	for _, tc := range []struct {
		name string
		req  api.CampaignRequest
		bad  []string // the invalid params, in order
		want string   // the value, when valid
	}{
		{"a value", api.CampaignRequest{Owner: "a", Value: ptr("10.0.0.1:80")}, nil, "10.0.0.1:80"},
		{"an empty value", api.CampaignRequest{Owner: "a", Value: ptr("")}, nil, ""},
		{"the longest value", api.CampaignRequest{Owner: "a", Value: ptr(strings.Repeat("v", api.MaxValueLen))}, nil, strings.Repeat("v", api.MaxValueLen)},
		{"no value", api.CampaignRequest{Owner: "a"}, []string{"value"}, ""},
		{"a value too long", api.CampaignRequest{Owner: "a", Value: ptr(strings.Repeat("v", api.MaxValueLen+1))}, []string{"value"}, ""},
		{"a value that is not UTF-8", api.CampaignRequest{Owner: "a", Value: ptr("\xff")}, []string{"value"}, ""},
		{"a replacement character", api.CampaignRequest{Owner: "a", Value: ptr("a\uFFFDb")}, []string{"value"}, ""},
		{"every field bad", api.CampaignRequest{TTLms: ptr(int64(0)), Waitms: ptr(int64(-1))}, []string{"owner", "ttl_ms", "wait_ms", "value"}, ""},
		{"a ticket without a wait", api.CampaignRequest{Owner: "a", Value: ptr("v"), QueueTicket: "tk"}, []string{"queue_ticket"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, bad := tc.req.Validate(l)
			var names []string
			for _, p := range bad {
				names = append(names, p.Name)
			}
			assert.Equal(t, tc.bad, names)
			if tc.bad == nil {
				assert.Equal(t, tc.want, c.Value)
				assert.Equal(t, 30*time.Second, c.TTL)
			}
		})
	}
	v, bad := api.ProclaimRequest{}.Validate(l)
	assert.Empty(t, v)
	assert.Len(t, bad, 1)
}
