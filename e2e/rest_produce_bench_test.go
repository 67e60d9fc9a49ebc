package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// BenchmarkProduceREST times one Produce of 100 records of 1 KiB through the
// REST gateway and through gRPC, the shape of benchmark row G1.
//
//	go test -run '^$' -bench BenchmarkProduceREST -benchtime 2000x ./e2e/
func BenchmarkProduceREST(b *testing.B) {
	s := newStack(b, app.Options{})
	s.createTopic(b, "bench", 1, nil)
	value := bytes.Repeat([]byte("x"), 1024)
	type rec struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	body := struct {
		Partition int   `json:"partition"`
		Records   []rec `json:"records"`
	}{}
	p := int32(0)
	req := &sharelogv1.ProduceRequest{Topic: "bench", Partition: &p}
	for i := range 100 {
		k := fmt.Appendf(nil, "k%06d", i)
		body.Records = append(body.Records, rec{Key: base64.StdEncoding.EncodeToString(k), Value: base64.StdEncoding.EncodeToString(value)})
		req.Records = append(req.Records, &sharelogv1.Record{Key: k, Value: value})
	}
	raw, err := json.Marshal(body)
	require.NoError(b, err)
	b.Run("rest", func(b *testing.B) {
		hc := s.http.Client()
		for b.Loop() {
			resp, err := hc.Post(s.http.URL+"/v1/topics/bench/records", "application/json", bytes.NewReader(raw))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatal(resp.Status)
			}
		}
	})
	b.Run("grpc", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.log.Produce(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
