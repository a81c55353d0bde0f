// gt-serve: node predictions, embeddings and recommendations over HTTP/1.1 with JSON bodies, on top of
// gt::InferenceSession (docs/serving.md has the API, the limits and the worst-case memory).
//
//   gt-serve MODEL.h5 [--dataset DATA.h5] [--host 127.0.0.1] [--port 7070] [--device auto] ...
//   (gt-serve --help lists every option with its default)
//
//   POST /v1/predict {"nodes": [1, 2]}  -> {"predictions": [0, 2], "logits": [[..], [..]]}
//   POST /v1/embed   {"nodes": [1, 2]}  -> {"embeddings": [[..], [..]]}
//   POST /v1/recommend {"user": 3, "k": 20}     -> {"user": 3, "items": [..], "scores": [..]}
//   POST /v1/recommend {"users": [3, 4], "k": 5} -> {"recommendations": [{"user": 3, ...}, ..]}
//   POST /v1/score   {"pairs": [[3, 41], ..]}     -> {"scores": [..]}
//   GET  /v1/info                        -> {"nodes": N, "classes": C, "dim": D, "device": "..", ...}
//   GET  /healthz                        -> 200 {"status": "ready"} once the model is loaded, else 503
//   GET  /livez                          -> 200 while the process serves
//   GET  /metrics                        -> Prometheus text format
// An error is {"error": "one line"} with a 4xx/5xx status.
//
// The server listens before the model is loaded (so that /healthz can say "loading"); the first
// line on stdout is "gt-serve: listening on HOST:PORT (...)" ("[HOST]:PORT" for IPv6; --port 0
// picks a free port), and "gt-serve: ready (...)" follows once requests can be answered. A model
// that cannot be loaded is a one-line error and exit status 1. SIGINT or SIGTERM stops the server:
// no new connections, the queued requests are answered at once (the session's coalescing window
// is cut short), then the connections are closed; it prints its counters.
//
// recommend and score answer for a link model (a recommender: model.embedding_dim > 0; issue 44's
// "gt-serve answers recommend USER K" is POST /v1/recommend) and for a link encoder over node
// features (a feature model on a link dataset), predict for a node model; the other kind's
// requests are answered 400 naming the model. /v1/embed serves all three.
//
// The line protocol of earlier versions is gone (docs/serving.md says why).
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include <graphtensor/core/error.h>
#include <graphtensor/serve/inference.h>
#include "service/bounded_http.h"
#include "service/serve_metrics.h"
#include "service/serve_requests.h"

namespace {

using Clock = std::chrono::steady_clock;
using gt_serve::fjson;
using gt_serve::json;

int g_stop_pipe[2] = {-1, -1};

void on_signal(int) {
  char c = 1;
  [[maybe_unused]] ssize_t n = ::write(g_stop_pipe[1], &c, 1);
}

void set_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void set_error(httplib::Response& res, int status, const std::string& message) {
  set_json(res, status, json{{"error", message}}.dump() + "\n");
}

}  // namespace

using namespace gt_serve;

int main(int argc, char** argv) {
  // One line at a time even into a file or a pipe, so that a log shows progress as it happens
  // and keeps every line written before a SIGTERM (stdio buffers a redirected stdout in 4 KiB).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string model, dataset, host = "127.0.0.1", port = "7070", fanouts = "all";
  gt::InferenceOptions opt;
  // A server's micro-batch is smaller than the library's (1,024): a one-node request waits for the
  // micro-batch running before its own, so the batch bounds what a client asking for many nodes
  // (or never reading them) adds to everyone else's latency. The price is more, smaller dense
  // products for large requests; --max-batch raises it for a server of trusted batch clients.
  opt.max_batch_nodes = 128;
  gt_serve::HttpLimits limits;
  int64_t max_request_ids = 65536;

  CLI::App app{"Serves a trained model's node predictions and embeddings over HTTP/1.1 with JSON bodies:\n"
               "POST /v1/predict and /v1/embed {\"nodes\": [..]}, GET /v1/info, /healthz, /livez, /metrics; a link\n"
               "model (a recommender) answers POST /v1/recommend {\"user\": U, \"k\": K} and /v1/score {\"pairs\": [..]}.\n"
               "Every resource a client can hold is bounded by the options below (docs/serving.md).",
               "gt-serve"};
  gt_cli::configure(app);
  app.add_option("model", model, "a training checkpoint (train.checkpoint) or best-model weights file")->required();
  app.add_option("--dataset", dataset, "the dataset to answer on (default: the model's stored dataset.path)");
  app.add_option("--host", host, "the address to listen on");
  app.add_option("--port", port, "the port to listen on (0: a free one, printed on the first line)")
      ->check(gt_cli::integer(0, 65535));
  app.add_option("--device", opt.device, "cpu, cuda, cuda:N or auto");
  app.add_option("--fanouts", fanouts, "neighbours sampled per layer, e.g. 10,10 (all: full neighbourhoods)");
  app.add_option("--max-batch", opt.max_batch_nodes, "seed nodes per micro-batch")->check(gt_cli::integer(1));
  app.add_option("--max-wait-us", opt.max_wait_us, "coalescing window after the oldest queued request")
      ->check(gt_cli::integer(0, 60'000'000, "a number of microseconds"));
  app.add_option("--threads", opt.threads, "CPU threads of the session (0: all cores)")->check(gt_cli::integer(0, 4096));
  app.add_option("--max-connections", limits.max_connections, "connections open at once; more are answered 503")
      ->check(gt_cli::integer(1, 100000));
  app.add_option("--max-request-ids", max_request_ids, "node ids in one request; more are answered 413")
      ->check(gt_cli::integer(1, int64_t{1} << 24));
  app.add_option("--max-request-bytes", limits.max_request_bytes, "bytes of one request's body; more are answered 413")
      ->check(gt_cli::integer(64, int64_t{1} << 32));
  app.add_option("--request-timeout-s", limits.request_timeout_s,
                 "a request's line, headers and body must arrive within this (a new connection's first request: from "
                 "the connection); slower senders are dropped")
      ->check(gt_cli::real(0, 3600, true, "a number of seconds"));
  app.add_option("--idle-timeout-s", limits.idle_timeout_s, "a keep-alive connection without a request for this long is closed")
      ->check(gt_cli::real(0, 86400, true, "a number of seconds"));
  app.add_option("--write-timeout-s", limits.write_timeout_s,
                 "an answer the client has not read within this is dropped with its connection")
      ->check(gt_cli::real(0, 3600, true, "a number of seconds"));
  app.add_option("--max-queued-bytes", limits.max_queued_bytes,
                 "bytes of answers being made or waiting for their clients, all connections together; a request whose "
                 "answer would exceed it is answered 503")
      ->check(gt_cli::integer(1 << 16, int64_t{1} << 40));
  app.add_option("--send-buffer-bytes", limits.send_buffer_bytes, "the kernel's send buffer of each connection (SO_SNDBUF)")
      ->check(gt_cli::integer(4096, 64 << 20));
  if (int rc = gt_cli::parse(app, argc, argv); rc >= 0) return rc;
  if (fanouts != "all") {
    bool ok;
    opt.fanouts = gt_cli::int_list(fanouts, ok);
    if (!ok) {
      std::cerr << "gt-serve: --fanouts needs a list of integers like 10,10, or all, got '" << fanouts
                << "' (see gt-serve --help)\n";
      return 2;
    }
  }

  // A client that goes away must never kill the server: writes use MSG_NOSIGNAL, and SIGPIPE is
  // ignored as well for any write that does not.
  ::signal(SIGPIPE, SIG_IGN);
  // Each connection holds a descriptor: take the hard limit, and say so when it is below the cap.
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur != RLIM_INFINITY && static_cast<int64_t>(rl.rlim_cur) < limits.max_connections + 64)
      std::cerr << "gt-serve: warning: the descriptor limit (" << rl.rlim_cur << ") is below --max-connections "
                << limits.max_connections << " + 64; connections beyond it wait (ulimit -n)\n";
  }

  try {
    if (::pipe(g_stop_pipe) != 0) GT_THROW("gt-serve", "", "cannot create a pipe: ", std::strerror(errno));
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);

    gt_serve::BoundedHttpServer server(limits);
    Metrics metrics;
    std::unique_ptr<gt::InferenceSession> session_holder;
    std::atomic<gt::InferenceSession*> session{nullptr};
    std::atomic<bool> stopping{false};
    std::string load_error;

    auto infer = [&](gt::InferenceOutput what) {
      return [&, what](const httplib::Request& req, httplib::Response& res) {
        gt::InferenceSession* s = session.load();
        if (!s) return set_error(res, 503, stopping ? "the server is stopping" : "the model is still loading (see /healthz)");
        NodesReader reader(max_request_ids);
        if (!json::sax_parse(req.body, &reader) || !reader.error.empty()) {
          if (reader.error.empty()) reader.error = "the body is not {\"nodes\": [id, ...]}";
          return set_error(res, reader.too_many ? 413 : 400, reader.error);
        }
        if (!reader.saw_nodes) return set_error(res, 400, "the body has no key \"nodes\" (it is {\"nodes\": [id, ...]})");
        const bool logits = what == gt::InferenceOutput::kLogits;
        const int64_t n = static_cast<int64_t>(reader.ids.size());
        const int64_t bound = answer_bound(n, logits ? s->num_classes() : s->embedding_dim(), logits);
        // An answer larger than the whole budget would be refused however long the client waited.
        if (bound > limits.max_queued_bytes)
          return set_error(res, 413,
                           "the answer to " + std::to_string(n) + " nodes would need " + std::to_string(bound) +
                               " bytes, more than the server's --max-queued-bytes " +
                               std::to_string(limits.max_queued_bytes) + " (split the request)");
        if (!server.reserve_answer(bound))
          return set_error(res, 503,
                           "server busy: answers held for clients would exceed --max-queued-bytes " +
                               std::to_string(limits.max_queued_bytes) + " (retry, or ask for fewer nodes)");
        // A client that sent its request and closed the connection at once gets nothing computed.
        if (server.client_gone()) return set_error(res, 499, "the client closed the connection");
        auto cancelled = std::make_shared<std::atomic<bool>>(false);
        std::future<gt::Tensor> fut = s->submit(what, std::move(reader.ids), cancelled);
        // Wait for the answer, looking every 20 ms whether the client is still there: the rows of
        // a client that has gone are not computed (the session drops its queued rows).
        while (fut.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
          if (!*cancelled && server.client_gone()) *cancelled = true;
        if (*cancelled) {
          try {
            fut.get();
          } catch (...) {
          }
          return set_error(res, 499, "the client closed the connection");  // nobody reads this
        }
        try {
          gt::Tensor t = fut.get();
          set_json(res, 200, answer_text(what, t));
        } catch (const std::exception& e) {
          std::string msg = e.what();
          for (char& ch : msg)
            if (ch < 0x20 || ch > 0x7e) ch = ' ';
          set_error(res, error_status(msg), msg);
        }
      };
    };
    server.Post("/v1/predict", infer(gt::InferenceOutput::kLogits));
    server.Post("/v1/embed", infer(gt::InferenceOutput::kEmbedding));
    server.Post("/v1/recommend", [&](const httplib::Request& req, httplib::Response& res) {
      gt::InferenceSession* s = session.load();
      if (!s) return set_error(res, 503, stopping ? "the server is stopping" : "the model is still loading (see /healthz)");
      RecommendBody b;
      bool too_many = false;
      if (std::string e = read_recommend(req.body, max_request_ids, b, too_many); !e.empty())
        return set_error(res, too_many ? 413 : 400, e);
      // Per user: k ids of up to 20 characters and k scores of up to 16, and the user's own keys.
      const int64_t n = static_cast<int64_t>(b.users.size());
      const int64_t k = std::clamp<int64_t>(b.k, 0, gt::InferenceSession::kMaxRecommendK);
      const int64_t bound = 2 * (n * (k * 38 + 64) + 64) + n * k * 12;
      if (bound > limits.max_queued_bytes)
        return set_error(res, 413,
                         "the answer to " + std::to_string(n) + " users would need " + std::to_string(bound) +
                             " bytes, more than the server's --max-queued-bytes " +
                             std::to_string(limits.max_queued_bytes) + " (split the request)");
      if (!server.reserve_answer(bound))
        return set_error(res, 503,
                         "server busy: answers held for clients would exceed --max-queued-bytes " +
                             std::to_string(limits.max_queued_bytes) + " (retry, or ask for fewer users)");
      if (server.client_gone()) return set_error(res, 499, "the client closed the connection");
      auto cancelled = std::make_shared<std::atomic<bool>>(false);
      auto fut = s->submit_recommend(b.users, b.k, b.exclude_seen, cancelled);
      while (fut.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
        if (!*cancelled && server.client_gone()) *cancelled = true;
      try {
        const std::vector<gt::Recommendation> r = fut.get();
        set_json(res, 200, recommend_text(b, r));
      } catch (const std::exception& e) {
        if (*cancelled) return set_error(res, 499, "the client closed the connection");  // nobody reads this
        std::string msg = e.what();
        for (char& ch : msg)
          if (ch < 0x20 || ch > 0x7e) ch = ' ';
        set_error(res, error_status(msg), msg);
      }
    });
    server.Post("/v1/score", [&](const httplib::Request& req, httplib::Response& res) {
      gt::InferenceSession* s = session.load();
      if (!s) return set_error(res, 503, stopping ? "the server is stopping" : "the model is still loading (see /healthz)");
      std::vector<gt::EdgePair> pairs;
      bool too_many = false;
      if (std::string e = read_pairs(req.body, max_request_ids, pairs, too_many); !e.empty())
        return set_error(res, too_many ? 413 : 400, e);
      const int64_t bound = 2 * (static_cast<int64_t>(pairs.size()) * 17 + 64) + static_cast<int64_t>(pairs.size()) * 20;
      if (bound > limits.max_queued_bytes)
        return set_error(res, 413, "the answer to " + std::to_string(pairs.size()) + " pairs would need " +
                                       std::to_string(bound) + " bytes, more than the server's --max-queued-bytes " +
                                       std::to_string(limits.max_queued_bytes) + " (split the request)");
      if (!server.reserve_answer(bound))
        return set_error(res, 503,
                         "server busy: answers held for clients would exceed --max-queued-bytes " +
                             std::to_string(limits.max_queued_bytes) + " (retry, or ask for fewer pairs)");
      try {
        set_json(res, 200, fjson{{"scores", s->score(pairs)}}.dump() + "\n");
      } catch (const std::exception& e) {
        std::string msg = e.what();
        for (char& ch : msg)
          if (ch < 0x20 || ch > 0x7e) ch = ' ';
        set_error(res, error_status(msg), msg);
      }
    });
    server.Get("/v1/info", [&](const httplib::Request&, httplib::Response& res) {
      gt::InferenceSession* s = session.load();
      if (!s) return set_error(res, 503, "the model is still loading (see /healthz)");
      json info{{"nodes", s->num_nodes()}, {"classes", s->num_classes()}, {"dim", s->embedding_dim()},
                {"device", s->device()}, {"model", model}};
      // A link model: what /v1/recommend ranks ([begin, end) of the node ids).
      if (s->is_link_model()) {
        info["link"] = true;
        info["users"] = {s->user_range().first, s->user_range().second};
        info["items"] = {s->item_range().first, s->item_range().second};
      }
      set_json(res, 200, info.dump() + "\n");
    });
    server.Get("/healthz", [&](const httplib::Request&, httplib::Response& res) {
      const char* status = stopping ? "stopping" : session.load() ? "ready" : "loading";
      set_json(res, std::strcmp(status, "ready") == 0 ? 200 : 503, json{{"status", status}}.dump() + "\n");
    });
    server.Get("/livez", [&](const httplib::Request&, httplib::Response& res) {
      set_json(res, 200, json{{"status", "alive"}}.dump() + "\n");
    });
    server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
      std::ostringstream o;
      {
        std::lock_guard lk(metrics.mu);
        o << "# HELP gt_http_requests_total HTTP requests answered, by endpoint and status code.\n"
             "# TYPE gt_http_requests_total counter\n";
        for (const auto& [k, v] : metrics.requests)
          o << "gt_http_requests_total{endpoint=\"" << k.first << "\",code=\"" << k.second << "\"} " << v << "\n";
        o << "# HELP gt_http_errors_total HTTP requests answered with a status of 400 or more, by endpoint.\n"
             "# TYPE gt_http_errors_total counter\n";
        std::map<std::string, int64_t> errors;
        for (const auto& e : kEndpoints) errors[e] = 0;
        for (const auto& [k, v] : metrics.requests)
          if (k.second >= 400) errors[k.first] += v;
        for (const auto& [e, v] : errors) o << "gt_http_errors_total{endpoint=\"" << e << "\"} " << v << "\n";
      }
      o << "# HELP gt_http_request_duration_seconds From a request's first byte to its answer written.\n"
           "# TYPE gt_http_request_duration_seconds histogram\n";
      for (const auto& [e, h] : metrics.latency) h->write(o, "gt_http_request_duration_seconds", "endpoint=\"" + e + "\"");
      const auto& c = server.counters();
      o << "# HELP gt_http_open_connections Connections open now.\n# TYPE gt_http_open_connections gauge\n"
        << "gt_http_open_connections " << c.open.load() << "\n"
        << "# HELP gt_http_max_connections The --max-connections cap.\n# TYPE gt_http_max_connections gauge\n"
        << "gt_http_max_connections " << limits.max_connections << "\n"
        << "# HELP gt_http_connections_total Connections accepted, and of them refused for the cap.\n"
           "# TYPE gt_http_connections_total counter\n"
        << "gt_http_connections_total{result=\"accepted\"} " << c.accepted.load() << "\n"
        << "gt_http_connections_total{result=\"refused\"} " << c.refused.load() << "\n"
        << "# HELP gt_http_connections_dropped_total Connections ended by a limit, by reason.\n"
           "# TYPE gt_http_connections_dropped_total counter\n"
        << "gt_http_connections_dropped_total{reason=\"request_timeout\"} " << c.request_timeouts.load() << "\n"
        << "gt_http_connections_dropped_total{reason=\"write_timeout\"} " << c.write_timeouts.load() << "\n"
        << "gt_http_connections_dropped_total{reason=\"idle_timeout\"} " << c.idle_timeouts.load() << "\n"
        << "gt_http_connections_dropped_total{reason=\"request_too_large\"} " << c.oversize.load() << "\n"
        << "gt_http_connections_dropped_total{reason=\"client_gone\"} " << c.clients_gone.load() << "\n"
        << "# HELP gt_http_queued_answer_bytes Bytes of answers being made or waiting for their clients (bound).\n"
           "# TYPE gt_http_queued_answer_bytes gauge\n"
        << "gt_http_queued_answer_bytes " << c.queued_bytes.load() << "\n"
        << "# HELP gt_http_queued_answer_refusals_total Requests answered 503 for --max-queued-bytes.\n"
           "# TYPE gt_http_queued_answer_refusals_total counter\n"
        << "gt_http_queued_answer_refusals_total " << c.budget_refusals.load() << "\n";
      gt::InferenceSession* s = session.load();
      o << "# HELP gt_model_ready 1 once the model is loaded and requests are answered.\n# TYPE gt_model_ready gauge\n"
        << "gt_model_ready " << (s && !stopping ? 1 : 0) << "\n";
      if (s) {
        const gt::InferenceSession::Stats st = s->stats();
        o << "# HELP gt_inference_requests_total Requests given to the inference session, by result.\n"
             "# TYPE gt_inference_requests_total counter\n"
          << "gt_inference_requests_total{result=\"ok\"} " << st.requests - st.failed_requests << "\n"
          << "gt_inference_requests_total{result=\"failed\"} " << st.failed_requests - st.cancelled_requests << "\n"
          << "gt_inference_requests_total{result=\"cancelled\"} " << st.cancelled_requests << "\n"
          << "# HELP gt_inference_queue_requests Requests queued in the session now.\n"
             "# TYPE gt_inference_queue_requests gauge\n"
          << "gt_inference_queue_requests " << st.queued_requests << "\n"
          << "# HELP gt_inference_queue_nodes Node ids queued in the session now.\n# TYPE gt_inference_queue_nodes gauge\n"
          << "gt_inference_queue_nodes " << st.queued_nodes << "\n"
          << "# HELP gt_inference_batch_nodes Distinct seed nodes per micro-batch.\n"
             "# TYPE gt_inference_batch_nodes histogram\n";
        int64_t cum = 0;
        for (int k = 0; k < gt::InferenceSession::kBatchBuckets; ++k) {
          cum += st.batch_nodes[static_cast<std::size_t>(k)];
          o << "gt_inference_batch_nodes_bucket{le=\""
            << (k + 1 < gt::InferenceSession::kBatchBuckets ? std::to_string(int64_t{1} << k) : "+Inf") << "\"} " << cum
            << "\n";
        }
        o << "gt_inference_batch_nodes_sum " << st.nodes << "\ngt_inference_batch_nodes_count " << st.batches << "\n";
      }
      o << "# HELP gt_process_resident_memory_bytes Resident memory of the server.\n"
           "# TYPE gt_process_resident_memory_bytes gauge\n"
        << "gt_process_resident_memory_bytes " << resident_bytes() << "\n";
      res.status = 200;
      res.set_content(o.str(), "text/plain; version=0.0.4");
    });
    // httplib's own refusals (404, 405, 413, 414, 400 for a malformed request) get a JSON body too.
    server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg = "HTTP " + std::to_string(res.status);
      if (res.status == 404 && (req.path == "/v1/predict" || req.path == "/v1/embed" || req.path == "/v1/recommend" ||
                                req.path == "/v1/score"))
        res.status = 405;
      if (res.status == 404 && (req.path == "/v1/info" || req.path == "/healthz" || req.path == "/livez" ||
                                req.path == "/metrics"))
        res.status = 405;
      if (res.status == 404) msg = "no endpoint " + req.path.substr(0, 128) + " (see docs/serving.md)";
      if (res.status == 405)
        msg = req.method.substr(0, 16) + " is not allowed on " + req.path +
              (req.path.rfind("/v1/", 0) == 0 && req.path != "/v1/info" ? " (use POST)" : " (use GET)");
      if (res.status == 413) msg = "the body is larger than the server's --max-request-bytes";
      if (res.status == 414) msg = "the request line is longer than 8 KiB";
      if (res.status == 400) msg = "malformed HTTP request";
      set_error(res, res.status, msg);
    });
    server.set_logger([&](const httplib::Request& req, const httplib::Response& res) {
      const double s = std::chrono::duration<double>(Clock::now() - gt_serve::BoundedHttpServer::request_start()).count();
      metrics.record(req.path, res.status, s);
    });

    const std::string bound = server.bind_listen(host, port);
    std::cout << "gt-serve: listening on " << bound << " (HTTP; GET /healthz answers 200 once the model is loaded)"
              << std::endl;
    std::thread loader([&] {
      try {
        session_holder = std::make_unique<gt::InferenceSession>(model, dataset, opt);
        session = session_holder.get();
        if (session_holder->is_link_model())
          std::cout << "gt-serve: ready (" << (session_holder->is_link_encoder() ? "link encoder: " : "link model: ")
                    << session_holder->num_nodes() << " nodes, users ["
                    << session_holder->user_range().first << ", " << session_holder->user_range().second << "), items ["
                    << session_holder->item_range().first << ", " << session_holder->item_range().second << "), dim "
                    << session_holder->embedding_dim() << ", device " << session_holder->device() << ")" << std::endl;
        else
          std::cout << "gt-serve: ready (" << session_holder->num_nodes() << " nodes, " << session_holder->num_classes()
                    << " classes, device " << session_holder->device() << ")" << std::endl;
      } catch (const std::exception& e) {
        load_error = e.what();
        on_signal(0);  // stops the server
      }
    });
    server.serve(g_stop_pipe[0], [&] {
      stopping = true;
      if (gt::InferenceSession* s = session.load()) s->shutdown();
    });
    loader.join();
    if (!load_error.empty()) {
      std::cerr << "gt-serve: error: " << load_error << "\n";
      return 1;
    }
    const auto& c = server.counters();
    std::cout << "gt-serve: stopped";
    if (session_holder) {
      const gt::InferenceSession::Stats st = session_holder->stats();
      std::cout << " after " << st.requests << " requests (" << st.failed_requests << " failed, "
                << st.cancelled_requests << " cancelled), " << st.batches << " micro-batches, " << st.nodes << " nodes";
    }
    std::cout << "; " << c.accepted.load() << " connections (" << c.refused.load() << " refused, "
              << c.request_timeouts.load() << " too slow to send, " << c.write_timeouts.load() << " too slow to read)"
              << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gt-serve: error: " << e.what() << "\n";
    return 1;
  }
}
