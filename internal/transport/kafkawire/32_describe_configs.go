package kafkawire

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
)

// handleDescribeConfigs describes TOPIC resources (every topic config of
// broker.Log.ConfigEntries with its value as Kafka formats it, its source,
// DYNAMIC_TOPIC_CONFIG when the topic set it, else DEFAULT_CONFIG, and
// IsDefault for v0; none is read-only or sensitive; v1+ synonyms list the
// config itself, v3+ its type and documentation) and GROUP resources (the
// share.* configs, effective values); ConfigNames filters when set.
func (l *Listener) handleDescribeConfigs(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		var kvs []configKV
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			if err := l.require(ctx, authz.DescribeConfigs, authz.Topic, r.ResourceName); err != nil {
				rr.ErrorCode, rr.ErrorMessage = l.requestError("describe configs", err)
				break
			}
			info, err := l.logOf(ctx).TopicInfo(ctx, r.ResourceName)
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = l.requestError("describe configs", err)
				break
			}
			kvs = l.topicConfigs(ctx, info.Config)
		case kmsg.ConfigResourceTypeGroupConfig:
			if l.shareOf(ctx) == nil {
				rr.ErrorCode = kerr.InvalidRequest.Code
				break
			}
			if err := l.require(ctx, authz.DescribeConfigs, authz.Group, r.ResourceName); err != nil {
				rr.ErrorCode, rr.ErrorMessage = l.requestError("describe configs", err)
				break
			}
			c, err := l.shareOf(ctx).GetConfig(ctx, r.ResourceName)
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = l.requestError("describe configs", err)
				break
			}
			kvs = groupConfigs(c)
		default:
			rr.ErrorCode = kerr.InvalidRequest.Code
			msg := "only TOPIC and GROUP resources are served"
			rr.ErrorMessage = &msg
		}
		for _, kv := range kvs {
			if r.ConfigNames != nil && !slices.Contains(r.ConfigNames, kv.name) {
				continue
			}
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name, c.Value, c.Source = kv.name, &kv.value, kmsg.ConfigSource(kv.source)
			c.IsDefault = kv.source == sourceDefault
			if req.IncludeSynonyms {
				syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
				syn.Name, syn.Value, syn.Source = kv.name, &kv.value, kmsg.ConfigSource(kv.source)
				c.ConfigSynonyms = append(c.ConfigSynonyms, syn)
			}
			if kv.kind != 0 {
				c.ConfigType = kmsg.ConfigType(kv.kind)
			}
			if req.IncludeDocumentation && kv.doc != "" {
				c.Documentation = &kv.doc
			}
			rr.Configs = append(rr.Configs, c)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}
