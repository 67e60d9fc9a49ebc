/*
 * share_consumer: a KIP-932 share consumer on librdkafka >= 2.15 against
 * sharelog's Kafka listener (docs/kafka.md). Used by run.sh.
 *
 *   share_consumer <bootstrap> <group> <topic> <records>
 *
 * It subscribes in explicit acknowledgement mode, polls until every offset
 * 0..records-1 of the topic's partitions is accepted, RELEASEs the first
 * delivery of the first record it sees and expects that record again with
 * delivery count 2, commits synchronously and closes. It prints one line per
 * delivery and exits non-zero on any error, duplicate accept, unexpected
 * delivery count or timeout. RDKAFKA_DEBUG sets librdkafka's "debug"
 * property (its log goes to stderr).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#define MAX_RECORDS 100000
#define TIMEOUT_S 60

static void fail(const char *what, const char *msg) {
        fprintf(stderr, "FAIL: %s: %s\n", what, msg);
        exit(1);
}

static void check_error(const char *what, rd_kafka_error_t *err) {
        if (err) {
                char buf[512];
                snprintf(buf, sizeof(buf), "%s (%s)", rd_kafka_error_string(err),
                         rd_kafka_err2name(rd_kafka_error_code(err)));
                rd_kafka_error_destroy(err);
                fail(what, buf);
        }
}

int main(int argc, char **argv) {
        char errstr[512];
        if (argc != 5) {
                fprintf(stderr, "usage: %s <bootstrap> <group> <topic> <records>\n", argv[0]);
                return 2;
        }
        const char *bootstrap = argv[1], *group = argv[2], *topic = argv[3];
        long n = strtol(argv[4], NULL, 10);
        if (n <= 0 || n > MAX_RECORDS)
                fail("records", "must be 1..100000");

        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "share.acknowledgement.mode", "explicit", errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "client.id", "sharelog-interop-librdkafka", errstr, sizeof(errstr)))
                fail("config", errstr);
        const char *debug = getenv("RDKAFKA_DEBUG"); /* e.g. protocol,cgrp */
        if (debug && *debug && rd_kafka_conf_set(conf, "debug", debug, errstr, sizeof(errstr)))
                fail("config debug", errstr);
        rd_kafka_share_t *sc = rd_kafka_share_consumer_new(conf, errstr, sizeof(errstr));
        if (!sc)
                fail("rd_kafka_share_consumer_new", errstr);

        rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
        rd_kafka_resp_err_t rerr = rd_kafka_share_subscribe(sc, topics);
        rd_kafka_topic_partition_list_destroy(topics);
        if (rerr)
                fail("rd_kafka_share_subscribe", rd_kafka_err2str(rerr));

        char *accepted = calloc((size_t)n, 1);
        long accepted_n = 0, deliveries = 0;
        int64_t released = -1; /* offset released once, to be redelivered */
        int redelivered = 0;
        time_t deadline = time(NULL) + TIMEOUT_S;
        while (accepted_n < n) {
                if (time(NULL) > deadline) {
                        fprintf(stderr, "FAIL: timeout: %ld of %ld accepted, redelivered=%d\n",
                                accepted_n, n, redelivered);
                        return 1;
                }
                rd_kafka_messages_t *msgs = NULL;
                check_error("rd_kafka_share_poll", rd_kafka_share_poll(sc, 1000, &msgs));
                size_t cnt = msgs ? rd_kafka_messages_count(msgs) : 0;
                for (size_t i = 0; i < cnt; i++) {
                        rd_kafka_message_t *m = rd_kafka_messages_get(msgs, i);
                        if (m->err)
                                fail("record", rd_kafka_message_errstr(m));
                        int16_t dc = rd_kafka_message_delivery_count(m);
                        deliveries++;
                        printf("delivery partition=%" PRId32 " offset=%" PRId64 " count=%d\n",
                               m->partition, m->offset, dc);
                        if (m->partition != 0 || m->offset < 0 || m->offset >= n)
                                fail("record", "outside partition 0, offsets 0..records-1");
                        rd_kafka_share_AcknowledgeType_t t = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_ACCEPT;
                        if (released < 0) {
                                if (dc != 1)
                                        fail("record", "first delivery with count != 1");
                                released = m->offset;
                                t = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_RELEASE;
                        } else if (m->offset == released && !redelivered) {
                                if (dc != 2)
                                        fail("record", "released record redelivered with count != 2");
                                redelivered = 1;
                        } else if (dc != 1) {
                                fail("record", "delivery count != 1");
                        }
                        if (t == RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_ACCEPT) {
                                if (accepted[m->offset])
                                        fail("record", "accepted twice");
                                accepted[m->offset] = 1;
                                accepted_n++;
                        }
                        rerr = rd_kafka_share_acknowledge_type(sc, m, t);
                        if (rerr)
                                fail("rd_kafka_share_acknowledge_type", rd_kafka_err2str(rerr));
                }
                rd_kafka_messages_destroy(msgs);
        }

        rd_kafka_topic_partition_list_t *res = NULL;
        check_error("rd_kafka_share_commit_sync", rd_kafka_share_commit_sync(sc, 10000, &res));
        if (res) {
                for (int i = 0; i < res->cnt; i++)
                        if (res->elems[i].err)
                                fail("commit result", rd_kafka_err2str(res->elems[i].err));
                rd_kafka_topic_partition_list_destroy(res);
        }
        check_error("rd_kafka_share_consumer_close", rd_kafka_share_consumer_close(sc));
        check_error("rd_kafka_share_destroy", rd_kafka_share_destroy(sc));
        free(accepted);
        printf("OK: %ld records accepted in %ld deliveries; offset %" PRId64
               " released once and redelivered with count 2\n",
               n, deliveries, released);
        return 0;
}
