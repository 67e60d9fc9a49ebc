/*
 * ordered_consumer: one of several librdkafka (>= 2.15) KIP-932 share
 * consumers in a key-ordered share group (docs/queues.md, share.ordering=key)
 * against sharelog's Kafka listener. Used by run.sh, which runs three of
 * them in parallel processes and checks their history with keycheck.
 *
 *   ordered_consumer <bootstrap> <group> <topic> <seed>
 *
 * Explicit acknowledgement mode: for every poll it prints, per record,
 *
 *   got <ns> <partition> <offset> <delivery count> <key>
 *
 * when rd_kafka_share_poll has returned it, "works" up to a millisecond,
 * then per record, just before rd_kafka_share_acknowledge_type,
 *
 *   let <ns> <partition> <offset> <ACCEPT|RELEASE|REJECT>
 *
 * (15% RELEASE, 5% REJECT, chosen with the seed), commits synchronously and
 * prints the per-partition results of that commit:
 *
 *   result <partition> <error name, NO_ERROR on success>
 *
 * <ns> is CLOCK_MONOTONIC, the same clock in every process of the machine.
 * It runs until SIGTERM or SIGINT (then commits, closes and exits 0) or for
 * at most TIMEOUT_S, and exits non-zero on any error of the API calls.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#define TIMEOUT_S 120

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
        (void)sig;
        stop = 1;
}

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

static int64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* commit sends the batch's acknowledgements and prints their results. */
static void commit(rd_kafka_share_t *sc) {
        rd_kafka_topic_partition_list_t *res = NULL;
        check_error("rd_kafka_share_commit_sync", rd_kafka_share_commit_sync(sc, 10000, &res));
        if (!res)
                return;
        for (int i = 0; i < res->cnt; i++)
                printf("result %" PRId32 " %s\n", res->elems[i].partition,
                       rd_kafka_err2name(res->elems[i].err));
        rd_kafka_topic_partition_list_destroy(res);
}

int main(int argc, char **argv) {
        char errstr[512];
        if (argc != 5) {
                fprintf(stderr, "usage: %s <bootstrap> <group> <topic> <seed>\n", argv[0]);
                return 2;
        }
        const char *bootstrap = argv[1], *group = argv[2], *topic = argv[3];
        srand((unsigned)strtoul(argv[4], NULL, 10));
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
        setvbuf(stdout, NULL, _IOLBF, 0);

        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "share.acknowledgement.mode", "explicit", errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "max.poll.records", "5", errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "client.id", "sharelog-interop-librdkafka-ordered", errstr, sizeof(errstr)))
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

        time_t deadline = time(NULL) + TIMEOUT_S;
        long deliveries = 0;
        while (!stop) {
                if (time(NULL) > deadline) {
                        fprintf(stderr, "FAIL: timeout after %ld deliveries\n", deliveries);
                        return 1;
                }
                rd_kafka_messages_t *msgs = NULL;
                check_error("rd_kafka_share_poll", rd_kafka_share_poll(sc, 200, &msgs));
                size_t cnt = msgs ? rd_kafka_messages_count(msgs) : 0;
                int64_t got = now_ns();
                for (size_t i = 0; i < cnt; i++) {
                        rd_kafka_message_t *m = rd_kafka_messages_get(msgs, i);
                        if (m->err)
                                fail("record", rd_kafka_message_errstr(m));
                        printf("got %" PRId64 " %" PRId32 " %" PRId64 " %d %.*s\n", got, m->partition,
                               m->offset, rd_kafka_message_delivery_count(m), (int)m->key_len,
                               (const char *)m->key);
                }
                if (cnt == 0) {
                        rd_kafka_messages_destroy(msgs);
                        continue;
                }
                deliveries += (long)cnt;
                struct timespec work = {0, (long)(rand() % 1000) * 1000};
                nanosleep(&work, NULL);
                for (size_t i = 0; i < cnt; i++) {
                        rd_kafka_message_t *m = rd_kafka_messages_get(msgs, i);
                        rd_kafka_share_AcknowledgeType_t t = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_ACCEPT;
                        const char *name = "ACCEPT";
                        int v = rand() % 20;
                        if (v == 0) {
                                t = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_REJECT;
                                name = "REJECT";
                        } else if (v <= 3) {
                                t = RD_KAFKA_SHARE_ACKNOWLEDGE_TYPE_RELEASE;
                                name = "RELEASE";
                        }
                        printf("let %" PRId64 " %" PRId32 " %" PRId64 " %s\n", now_ns(), m->partition,
                               m->offset, name);
                        rerr = rd_kafka_share_acknowledge_type(sc, m, t);
                        if (rerr)
                                fail("rd_kafka_share_acknowledge_type", rd_kafka_err2str(rerr));
                }
                rd_kafka_messages_destroy(msgs);
                commit(sc);
        }
        check_error("rd_kafka_share_consumer_close", rd_kafka_share_consumer_close(sc));
        check_error("rd_kafka_share_destroy", rd_kafka_share_destroy(sc));
        fprintf(stderr, "OK: %ld deliveries\n", deliveries);
        return 0;
}
