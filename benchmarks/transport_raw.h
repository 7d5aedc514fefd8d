// transport_bench's baseline: raw ZeroMQ moving the same bytes over the same
// sockets as the parameter server (a ROUTER on a thread, a DEALER on the
// caller's), with no decode, check, apply or copy. See transport_bench.cc for
// the workloads.
#ifndef PS_BENCHMARKS_TRANSPORT_RAW_H_
#define PS_BENCHMARKS_TRANSPORT_RAW_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/transport_common.h"
#include "common/status.h"
#include "common/transport.h"

namespace ps::transport_bench {

// ---------------------------------------------------------------------------
// Raw ZeroMQ server: a ROUTER on a thread, no parameter-server logic.

class RawServer {
 public:
  enum class Mode {
    kEcho,  // 8-byte frame: pull request (reply with that many bytes); else push (8-byte ack)
    kSink,  // receive only; report the receive rate of every `batch` messages
  };

  // With options.curve a CURVE server: a ZAP handler lets in the keys of
  // `allowed`, as a shard's does.
  static StatusOr<std::unique_ptr<RawServer>> Create(Mode mode, uint64_t max_bytes,
                                                     const SocketOptions& options,
                                                     ZapHandler::Allowlist allowed = {}) {
    std::unique_ptr<RawServer> s(new RawServer(mode, max_bytes));
    PS_ASSIGN_OR_RETURN(s->context_, Context::Create(1));
    if (options.curve.enabled()) {
      PS_ASSIGN_OR_RETURN(s->zap_, ZapHandler::Start(s->context_.get(), std::move(allowed), nullptr));
    }
    PS_ASSIGN_OR_RETURN(s->socket_,
                        Socket::Create(s->context_.get(), SocketType::kRouter, options));
    PS_RETURN_IF_ERROR(s->socket_->Bind("tcp://127.0.0.1:*"));
    PS_ASSIGN_OR_RETURN(s->endpoint_, s->socket_->LastEndpoint());
    return s;
  }
  ~RawServer() { Stop().IgnoreError(); }

  void Start() {
    thread_ = std::thread([this] { status_ = Loop(); });
  }
  // Returns the status the loop ended with.
  Status Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  const std::string& endpoint() const { return endpoint_; }

  // kSink: the number of messages per measured batch. Call before the
  // sender starts a batch.
  void SetSinkBatch(uint64_t batch) { sink_batch_.store(batch); }
  // kSink: waits for the next full batch and returns its receive rate
  // (messages/s, first to last message of the batch).
  StatusOr<double> NextSinkRate() {
    const uint64_t batch = sink_batch_.load();
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(30), [&] { return !sink_rates_.empty(); })) {
      return DeadlineExceededError("raw sink: no batch of " + std::to_string(batch) +
                                   " messages arrived within 30 s");
    }
    double r = sink_rates_.front();
    sink_rates_.pop_front();
    return r;
  }

 private:
  RawServer(Mode mode, uint64_t max_bytes)
      : mode_(mode), buffer_(std::make_shared<std::vector<std::byte>>(max_bytes, std::byte{7})) {}

  Status Loop() {
    std::vector<Frame> frames;
    std::vector<bool> readable;
    Socket* sockets[] = {socket_.get()};
    uint64_t count = 0;
    Clock::time_point first;
    while (!stop_.load(std::memory_order_relaxed)) {
      auto ready = PollReadable(sockets, 100, &readable);
      if (!ready.ok()) return ready.status().WithContext("raw server");
      for (int i = 0; i < 256 && !stop_.load(std::memory_order_relaxed); ++i) {
        auto got = socket_->TryRecv(&frames);
        if (!got.ok()) return got.status().WithContext("raw server");
        if (!*got) break;
        if (frames.size() != 2) {
          return DataLossError("raw server: got a message of " + std::to_string(frames.size()) +
                               " frames, expected 2 (routing id, payload)");
        }
        if (mode_ == Mode::kSink) {
          const Clock::time_point now = Clock::now();
          if (count == 0) first = now;
          if (++count == sink_batch_.load(std::memory_order_relaxed)) {
            std::lock_guard<std::mutex> lock(mu_);
            sink_rates_.push_back(static_cast<double>(count - 1) / Seconds(now - first));
            count = 0;
            cv_.notify_all();
          }
          continue;
        }
        Frame reply[2] = {std::move(frames[0]), Frame()};
        if (frames[1].size() == sizeof(uint64_t)) {
          uint64_t n = 0;
          std::memcpy(&n, frames[1].data(), sizeof(n));
          if (n > buffer_->size()) {
            return InvalidArgumentError("raw server: pull of " + std::to_string(n) +
                                        " bytes exceeds its buffer");
          }
          PS_ASSIGN_OR_RETURN(reply[1], Frame::Share(buffer_->data(), n, buffer_));
        } else {
          const uint64_t ack = frames[1].size();
          reply[1] = Frame::CopyOf(&ack, sizeof(ack));
        }
        PS_RETURN_IF_ERROR(socket_->Send(reply));
      }
    }
    return Status::Ok();
  }

  const Mode mode_;
  const std::shared_ptr<std::vector<std::byte>> buffer_;  // pull replies share it
  std::unique_ptr<Context> context_;                      // before socket_: destroyed after it
  std::unique_ptr<ZapHandler> zap_;                       // CURVE only
  std::unique_ptr<Socket> socket_;
  std::string endpoint_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  Status status_;  // written by the loop thread, read after join

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> sink_batch_{1000};
  std::deque<double> sink_rates_;  // guarded by mu_
};

// ---------------------------------------------------------------------------
// Raw ZeroMQ client: a DEALER; replies come back in send order (one peer,
// one connection, a server that answers in arrival order).

class RawClient {
 public:
  static StatusOr<std::unique_ptr<RawClient>> Create(const std::string& endpoint,
                                                     uint64_t max_bytes,
                                                     const SocketOptions& options) {
    std::unique_ptr<RawClient> c(new RawClient(max_bytes));
    PS_ASSIGN_OR_RETURN(c->context_, Context::Create(1));
    PS_ASSIGN_OR_RETURN(c->socket_,
                        Socket::Create(c->context_.get(), SocketType::kDealer, options));
    PS_RETURN_IF_ERROR(c->socket_->Connect(endpoint));
    return c;
  }

  Status Run(OpKind op, uint64_t bytes, int depth, const Limits& limits, Sample* out) {
    struct Pending {
      Clock::time_point start;
      bool pull;  // waiting for N bytes (else for an ack)
    };
    std::deque<Pending> pending;
    uint64_t issued = 0;
    const Clock::time_point t0 = Clock::now();
    Clock::time_point last_done = t0;
    auto send = [&](bool pull) -> Status {
      Frame f;
      if (pull) {
        f = Frame::CopyOf(&bytes, sizeof(bytes));
      } else {
        PS_ASSIGN_OR_RETURN(f, Frame::Share(buffer_->data(), bytes, buffer_));
      }
      return socket_->Send(std::span<Frame>(&f, 1)).WithContext("raw client");
    };
    auto start_op = [&](Clock::time_point now) -> Status {
      ++issued;
      pending.push_back({now, op == OpKind::kPull});
      return send(op == OpKind::kPull);
    };
    auto should_issue = [&](Clock::time_point now) {
      return issued < limits.min_ops || Seconds(now - t0) < limits.seconds;
    };
    for (int i = 0; i < depth; ++i) PS_RETURN_IF_ERROR(start_op(Clock::now()));
    Socket* sockets[] = {socket_.get()};
    Clock::time_point progress = t0;
    while (!pending.empty()) {
      auto ready = PollReadable(sockets, 1000, &readable_);
      if (!ready.ok()) return ready.status().WithContext("raw client");
      if (*ready == 0) {
        if (Clock::now() - progress > std::chrono::seconds(10)) {
          return DeadlineExceededError("raw client: no reply from the raw server within 10 s");
        }
        continue;
      }
      while (true) {
        auto got = socket_->TryRecv(&frames_);
        if (!got.ok()) return got.status().WithContext("raw client");
        if (!*got) break;
        if (pending.empty()) return DataLossError("raw client: a reply nobody asked for");
        const Pending p = pending.front();
        pending.pop_front();
        const uint64_t expected = p.pull ? bytes : sizeof(uint64_t);
        if (frames_.size() != 1 || frames_[0].size() != expected) {
          return DataLossError("raw client: reply of " + std::to_string(frames_.size()) +
                               " frames / " + std::to_string(frames_[0].size()) +
                               " bytes, expected 1 frame of " + std::to_string(expected));
        }
        const Clock::time_point now = Clock::now();
        progress = now;
        if (op == OpKind::kPushPull && !p.pull) {
          pending.push_back({p.start, true});
          PS_RETURN_IF_ERROR(send(true));
          continue;
        }
        out->latencies_us.push_back(Micros(now - p.start));
        ++out->ops;
        last_done = now;
        if (should_issue(now)) PS_RETURN_IF_ERROR(start_op(now));
      }
    }
    out->seconds = Seconds(last_done - t0);
    return Status::Ok();
  }

  // Sends `count` frames of `bytes` as fast as the send queue accepts them.
  Status SendOneWay(uint64_t bytes, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      PS_ASSIGN_OR_RETURN(Frame f, Frame::Share(buffer_->data(), bytes, buffer_));
      const Clock::time_point start = Clock::now();
      while (true) {
        Status s = socket_->Send(std::span<Frame>(&f, 1));
        if (s.ok()) break;
        if (s.code() != StatusCode::kUnavailable) return s.WithContext("raw one-way sender");
        if (Clock::now() - start > std::chrono::seconds(10)) {
          return DeadlineExceededError("raw one-way sender: send queue stayed full for 10 s");
        }
        std::this_thread::yield();  // queue full (HWM): let the I/O threads drain it
      }
    }
    return Status::Ok();
  }

 private:
  explicit RawClient(uint64_t max_bytes)
      : buffer_(std::make_shared<std::vector<std::byte>>(max_bytes, std::byte{1})) {}

  const std::shared_ptr<std::vector<std::byte>> buffer_;
  std::unique_ptr<Context> context_;
  std::unique_ptr<Socket> socket_;
  std::vector<Frame> frames_;
  std::vector<bool> readable_;
};

}  // namespace ps::transport_bench

#endif  // PS_BENCHMARKS_TRANSPORT_RAW_H_
