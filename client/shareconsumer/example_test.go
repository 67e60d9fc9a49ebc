package shareconsumer_test

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"os"
	"os/signal"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharelog/sharelog/client/shareconsumer"
)

func process(shareconsumer.Record) error { return nil }

// A consumer that acknowledges every record explicitly: accepted when
// processed, released for another attempt (maybe by another member) when
// not.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	conn, err := grpc.NewClient("127.0.0.1:9090", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	c, err := shareconsumer.New(conn, shareconsumer.Config{
		GroupID:  "billing",
		Topics:   []string{"orders"},
		AckMode:  shareconsumer.AckExplicit,
		ClientID: "billing-worker",
		Logger:   slog.Default(),
		OnAcknowledgement: func(r shareconsumer.AckResult) {
			if r.Err != nil { // the records will be delivered again
				log.Printf("%s: acknowledgement not applied: %v", r.TopicPartition, r.Err)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background()) // final acknowledgements, then leave the group

	for {
		recs, err := c.Poll(ctx) // also sends the acknowledgements made since the last Poll
		if errors.Is(err, context.Canceled) {
			return // Ctrl-C
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range recs {
			if err := process(r); err != nil {
				_ = c.Acknowledge(r, shareconsumer.Release)
				continue
			}
			_ = c.Acknowledge(r, shareconsumer.Accept)
		}
	}
}
