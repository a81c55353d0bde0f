// Collectives for data parallelism: the host backend sums in rank order and every rank gets the
// same bits; mismatched calls and aborts are errors, not hangs; the TCP rendezvous hands rank 0's
// payload to every process; launcher variables are parsed; NCCL matches the host sums on 2 GPUs.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <graphtensor/core/error.h>
#include "framework/distributed/comm.h"
#include "framework/distributed/socket_io.h"
#include "tests/test_util.h"

namespace gt {
namespace {

std::vector<float> random_floats(std::size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(gen);
  return v;
}

template <typename F>
void run_ranks(int n, F&& f) {
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back([&f, r] { f(r); });
  for (auto& t : ts) t.join();
}

TEST(HostGroup, SumsInRankOrderAndEveryRankGetsTheSameBits) {
  constexpr int W = 3;
  constexpr std::size_t N = 1001;  // not a multiple of the rank count
  HostGroup group(W);
  std::vector<std::vector<float>> in(W), out(W);
  std::vector<std::vector<double>> din(W), dout(W);
  for (int r = 0; r < W; ++r) {
    in[r] = random_floats(N, 10 + r);
    din[r] = {1.0 * r, 0.5, -2.0 * r};
  }
  run_ranks(W, [&](int r) {
    auto comm = group.communicator(r);
    Context cpu;
    for (int rep = 0; rep < 5; ++rep) {  // the barrier and the scratch buffer are reused
      Tensor t = Tensor::from_vector(in[r]);
      comm->allreduce(t, cpu);
      out[r] = t.to_vector<float>();
    }
    Tensor d = Tensor::from_vector(din[r]);
    comm->allreduce(d, cpu);
    dout[r] = d.to_vector<double>();
  });
  for (std::size_t i = 0; i < N; ++i) {
    const float expect = (in[0][i] + in[1][i]) + in[2][i];
    for (int r = 0; r < W; ++r) ASSERT_EQ(out[r][i], expect) << "rank " << r << " element " << i;
  }
  for (int r = 0; r < W; ++r) EXPECT_EQ(dout[r], (std::vector<double>{3.0, 1.5, -6.0}));
}

TEST(HostGroup, AllgatherBytesGivesEveryRankEveryRanksBytesExactly) {
  // Lengths 0, 1 and 300 (every byte value, the high ones included), gathered whole and in pieces
  // of 7 floats (a piece boundary inside every non-empty region) and of 1; any zero or garbled
  // byte, or a region shifted by one, would show.
  constexpr int W = 4;
  std::vector<std::vector<char>> in(W);
  in[1] = {'\x80'};
  for (int i = 0; i < 300; ++i) in[2].push_back(static_cast<char>(255 - (i * 7) % 256));
  in[3] = {'a', '\0', '\xff', 'z', '\x01'};
  for (int64_t piece : {int64_t{1} << 24, int64_t{7}, int64_t{1}}) {
    HostGroup group(W);
    std::vector<std::vector<std::vector<char>>> out(W);
    run_ranks(W, [&](int r) {
      auto comm = group.communicator(r);
      Context cpu;
      out[r] = allgather_bytes(*comm, cpu, in[r], piece);
      out[r].push_back(allgather_bytes(*comm, cpu, {}, piece)[0]);  // nothing at all: one more round
    });
    for (int r = 0; r < W; ++r) {
      ASSERT_EQ(out[r].size(), static_cast<std::size_t>(W + 1)) << "rank " << r;
      for (int q = 0; q < W; ++q) EXPECT_EQ(out[r][q], in[q]) << "rank " << r << " got rank " << q << ", pieces of " << piece;
      EXPECT_TRUE(out[r][W].empty());
    }
  }
}

TEST(HostGroup, RanksThatDisagreeOnTheTensorGetAnError) {
  HostGroup group(2);
  std::atomic<int> errors{0};
  run_ranks(2, [&](int r) {
    auto comm = group.communicator(r);
    Tensor t = Tensor::zeros({10 + r}, DType::kFloat32);
    try {
      comm->allreduce(t, Context());
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("different tensors"), std::string::npos) << e.what();
      ++errors;
    }
  });
  EXPECT_EQ(errors.load(), 2);
}

TEST(HostGroup, AbortReleasesARankBlockedInACollective) {
  HostGroup group(2);
  auto waiting = group.communicator(0);
  std::string err;
  std::thread t([&] {
    Tensor x = Tensor::zeros({4}, DType::kFloat32);
    try {
      waiting->allreduce(x, Context());
    } catch (const Error& e) {
      err = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  group.communicator(1)->abort();  // rank 1 failed before its collective
  t.join();
  EXPECT_NE(err.find("aborted"), std::string::npos) << "'" << err << "'";
  Tensor y = Tensor::zeros({4}, DType::kFloat32);
  EXPECT_THROW(waiting->allreduce(y, Context()), Error) << "an aborted group stays aborted";
}

TEST(HostGroup, RejectsIntegerTensorsAndBadRanks) {
  HostGroup group(2);
  EXPECT_THROW(group.communicator(2), Error);
  auto c = group.communicator(0);
  Tensor ints = Tensor::zeros({3}, DType::kInt32);
  EXPECT_THROW(c->allreduce(ints, Context()), Error);
}

TEST(Rendezvous, RankZeroPayloadReachesEveryProcess) {
  constexpr int W = 4;
  const std::vector<char> payload = {'n', 'c', 'c', 'l', '\0', '\x7f'};
  std::vector<std::vector<char>> got(W);
  const int port = test::free_port();
  run_ranks(W, [&](int r) {
    ProcessGroupEnv e;
    e.world = W;
    e.rank = r;
    e.master_port = port;
    got[r] = rendezvous_broadcast(e, r == 0 ? payload : std::vector<char>{}, 30.0);
  });
  for (int r = 0; r < W; ++r) EXPECT_EQ(got[r], payload) << "rank " << r;
}

TEST(Rendezvous, AMissingRankZeroTimesOutNamingTheAddress) {
  ProcessGroupEnv e;
  e.world = 2;
  e.rank = 1;
  e.master_port = test::free_port();
  try {
    rendezvous_broadcast(e, {}, 0.5);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("127.0.0.1:" + std::to_string(e.master_port)), std::string::npos)
        << err.what();
  }
  e.rank = 0;  // and rank 0 alone times out counting who joined
  try {
    rendezvous_broadcast(e, {'x'}, 0.5);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("1 of 2 processes joined"), std::string::npos) << err.what();
  }
}

TEST(Rendezvous, AnUnresolvableMasterIsNamed) {
  ProcessGroupEnv e;
  e.world = 2;
  e.rank = 1;
  e.master_addr = "no-such-host.invalid";
  EXPECT_THROW(rendezvous_broadcast(e, {}, 0.5), Error);
}

// Runs the ranks' rendezvous in threads; each rank's error text ("" = it returned).
std::vector<std::string> rendezvous_errors(const std::vector<ProcessGroupEnv>& envs,
                                           const std::vector<std::string>& agreements, double timeout_s) {
  std::vector<std::string> errors(envs.size());
  run_ranks(static_cast<int>(envs.size()), [&](int i) {
    try {
      rendezvous_broadcast(envs[i], {'p'}, timeout_s, agreements[i]);
    } catch (const Error& e) {
      errors[i] = e.what();
    }
  });
  return errors;
}

ProcessGroupEnv rank_env(int world, int rank, int port) {
  ProcessGroupEnv e;
  e.world = world;
  e.rank = rank;
  e.master_port = port;
  return e;
}

TEST(Rendezvous, ADisagreementStopsEveryProcessNamingTheLine) {
  // Rank 2 was started with another seed: nobody goes on, and every process says which line.
  const int port = test::free_port();
  const std::string ours = "model.hidden: 64\ntrain.seed: 0\n", theirs = "model.hidden: 64\ntrain.seed: 1\n";
  auto errors = rendezvous_errors({rank_env(3, 0, port), rank_env(3, 1, port), rank_env(3, 2, port)},
                                  {ours, ours, theirs}, 30.0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("rank 0 has 'train.seed: 0', rank 2 has 'train.seed: 1'"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

TEST(Rendezvous, AnotherWorldSizeOrATakenRankStopsEveryProcess) {
  const int port = test::free_port();
  auto errors = rendezvous_errors({rank_env(2, 0, port), rank_env(3, 1, port)}, {"", ""}, 30.0);
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("rank 1 was started with a world size of 3, rank 0 with 2"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  const int port2 = test::free_port();
  errors = rendezvous_errors({rank_env(3, 0, port2), rank_env(3, 1, port2), rank_env(3, 1, port2)},
                             {"", "", ""}, 30.0);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(errors[r].find("a process joined as rank 1, which is taken"), std::string::npos)
        << "rank " << r << ": " << errors[r];
}

TEST(Rendezvous, StrayConnectionsAreDroppedAndRankZeroListensOnEveryInterface) {
  // A client that sends garbage, and one that says half a hello and hangs up, do not fail the
  // job. Rank 0 is told another address (as when its host name maps to 127.0.1.1 at home):
  // it listens on every interface, so rank 1 still reaches it at 127.0.0.1.
  const int port = test::free_port();
  std::vector<char> got;
  std::string error;
  std::thread zero([&] {
    ProcessGroupEnv e = rank_env(2, 0, port);
    e.master_addr = "127.0.0.2";
    try {
      got = rendezvous_broadcast(e, {'o', 'k'}, 30.0, "same\n");
    } catch (const Error& err) {
      error = err.what();
    }
  });
  auto stray = [&](const std::vector<char>& bytes) {
    for (int attempt = 0; attempt < 300; ++attempt) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        if (!bytes.empty()) (void)!::write(fd, bytes.data(), bytes.size());
        ::close(fd);
        return true;
      }
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  ASSERT_TRUE(stray({'G', 'E', 'T', ' ', '/', '\n'}));
  const uint32_t half_hello[2] = {0x47545256, 2};
  ASSERT_TRUE(stray(std::vector<char>(reinterpret_cast<const char*>(half_hello),
                                      reinterpret_cast<const char*>(half_hello) + sizeof half_hello)));
  std::vector<char> mine;
  std::string my_error;
  try {
    mine = rendezvous_broadcast(rank_env(2, 1, port), {}, 30.0, "same\n");
  } catch (const Error& err) {
    my_error = err.what();
  }
  zero.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(my_error, "");
  EXPECT_EQ(mine, (std::vector<char>{'o', 'k'}));
}

// After the rendezvous, the connections tell the processes of a job when one of them ends
// without finishing (threads stand for the processes; destroying a watch without finish() is what
// a killed process's closed sockets look like).
class PeerWatchTest : public ::testing::Test {
 protected:
  static constexpr int W = 3;
  // Rendezvous of W "processes"; every watch but `silent`'s started, reporting into lost[r]; with
  // timeout_s > 0 watching for hangs too, each rank's progress read from collectives[r], work[r].
  void start(double timeout_s = 0, int silent = -1) {
    const int port = test::free_port();
    run_ranks(W, [&](int r) { watches[r] = std::move(rendezvous(rank_env(W, r, port), {'x'}, 30.0).watch); });
    for (int r = 0; r < W; ++r) {
      EXPECT_EQ(watches[r]->peers(), r == 0 ? W - 1 : 1);
      if (r == silent) continue;  // alive, connected, and says nothing
      PeerWatch::Hangs hangs{timeout_s, [this, r] {
                               return PeerWatch::Progress{collectives[r].load(), work[r].load()};
                             }};
      watches[r]->start(
          [this, r](const std::string& why) {
            std::lock_guard<std::mutex> lock(mu);
            lost[r].push_back(why);
          },
          hangs);
    }
  }
  std::string first_lost(int r) {
    std::lock_guard<std::mutex> lock(mu);
    return lost[r].empty() ? std::string() : lost[r].front();
  }
  // Waits up to 5 s for every rank in `ranks` to have heard of a loss.
  bool heard(std::initializer_list<int> ranks) {
    for (int i = 0; i < 500; ++i) {
      bool all = true;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (int r : ranks) all = all && !lost[r].empty();
      }
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::unique_ptr<PeerWatch> watches[W];
  std::atomic<uint64_t> collectives[W] = {}, work[W] = {};
  std::mutex mu;
  std::vector<std::string> lost[W];
};

TEST_F(PeerWatchTest, ProcessesThatFinishAlarmNoOne) {
  start();
  watches[2]->finish();  // in any order, and a finished process may go away
  watches[2].reset();
  watches[0]->finish();
  watches[1]->finish();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int r = 0; r < W; ++r) EXPECT_TRUE(lost[r].empty()) << "rank " << r << ": " << lost[r].front();
}

TEST_F(PeerWatchTest, AProcessThatEndsWithoutFinishingIsNamedToEveryOther) {
  start();
  watches[2].reset();  // rank 2 is killed
  ASSERT_TRUE(heard({0, 1}));
  std::lock_guard<std::mutex> lock(mu);
  for (int r : {0, 1}) {
    ASSERT_EQ(lost[r].size(), 1u) << "once";
    EXPECT_NE(lost[r][0].find("the process of rank 2 of the job ended without finishing"), std::string::npos)
        << lost[r][0];
  }
  EXPECT_NE(lost[1][0].find("rank 0 stopped the job"), std::string::npos) << lost[1][0];
}

TEST_F(PeerWatchTest, ALostRankZeroIsNamedToEveryOther) {
  start();
  watches[0].reset();
  ASSERT_TRUE(heard({1, 2}));
  std::lock_guard<std::mutex> lock(mu);
  for (int r : {1, 2}) EXPECT_NE(lost[r][0].find("the process of rank 0"), std::string::npos) << lost[r][0];
}

TEST_F(PeerWatchTest, AProcessThatFallsSilentIsNamedToEveryOther) {
  start(/*timeout_s=*/0.5, /*silent=*/2);  // rank 2 is stopped (SIGSTOP): its sockets stay open
  ASSERT_TRUE(heard({0, 1}));
  for (int r : {0, 1})
    EXPECT_NE(first_lost(r).find("the process of rank 2 of the job sent nothing for 0.5 s (stopped"), std::string::npos)
        << first_lost(r);
  EXPECT_NE(first_lost(1).find("rank 0 stopped the job"), std::string::npos) << first_lost(1);
}

TEST_F(PeerWatchTest, ASilentRankZeroIsNamedByEveryOther) {
  start(0.5, /*silent=*/0);
  ASSERT_TRUE(heard({1, 2}));
  for (int r : {1, 2})
    EXPECT_NE(first_lost(r).find("the process of rank 0 of the job sent nothing"), std::string::npos) << first_lost(r);
}

TEST_F(PeerWatchTest, AProcessThatHoldsTheOthersUpIsNamedToAll) {
  // Ranks 0 and 2 have begun collective 5 and wait in it; rank 1 is stuck before it, doing nothing.
  collectives[0] = collectives[2] = 5;
  collectives[1] = 4;
  start(0.5);
  ASSERT_TRUE(heard({0, 1, 2}));  // rank 1 hears it too: it is alive, and stops rather than hang on
  for (int r = 0; r < W; ++r)
    EXPECT_NE(first_lost(r).find("the process of rank 1 of the job made no progress for 0.5 s while the others "
                                 "waited for it in a collective"),
              std::string::npos)
        << "rank " << r << ": " << first_lost(r);
}

TEST_F(PeerWatchTest, ProcessesThatWorkOrWaitTogetherAreNotHung) {
  // Rank 1 is behind in collectives but working (a long evaluation); ranks 0 and 2 are level and
  // idle (waiting for it). Nobody is silent. Nothing is lost in 2 timeouts and more (1 s: room for
  // a loaded machine or a sanitizer's slowdown; the alarms above fire after 0.5 s).
  collectives[0] = collectives[2] = 5;
  collectives[1] = 4;
  start(1.0);
  std::atomic<bool> done{false};
  std::thread worker([&] {
    while (!done) {
      ++work[1];
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  done = true;
  worker.join();
  for (int r = 0; r < W; ++r) EXPECT_TRUE(lost[r].empty()) << "rank " << r << ": " << first_lost(r);
  // Level again (rank 1 reached collective 5) and all idle: still nothing.
  collectives[1] = 5;
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  for (int r = 0; r < W; ++r) EXPECT_TRUE(lost[r].empty()) << "rank " << r << ": " << first_lost(r);
  for (int r = 0; r < W; ++r) watches[r]->finish();
}

// The PeerWatch's outgoing messages (net::Outbox) to a peer that stops reading: heartbeats are
// dropped while older bytes wait, nothing is torn, a message that must arrive is queued behind
// them, and everything queued arrives in order once the peer reads again. Small socket buffers
// make the socket refuse bytes (and take partial messages) after a few kilobytes.
TEST(Outbox, APeerThatStopsReadingGetsWholeMessagesInOrder) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0) << std::strerror(errno);
  net::Fd writer(sv[0]), reader(sv[1]);
  const int small = 2048;
  ::setsockopt(writer.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  ::setsockopt(reader.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  net::Outbox out;
  auto beat = [](uint32_t seq) {
    std::string m(17, 'B');
    std::memcpy(&m[1], &seq, sizeof seq);
    return m;
  };
  std::vector<uint32_t> sent;  // the beats the outbox took
  uint32_t seq = 0;
  int dropped = 0;
  for (int i = 0; i < 100000 && dropped < 3; ++i, ++seq) {
    const std::string m = beat(seq);
    if (out.send(writer.fd, m.data(), m.size(), true))
      sent.push_back(seq);
    else
      ++dropped;
  }
  ASSERT_EQ(dropped, 3) << "the socket never refused a byte";
  EXPECT_LE(out.waiting(), 17u) << "at most one beat waits";
  EXPECT_GE(sent.size(), 2u);
  const std::string lost = "L\x02\0\0\0\x01";  // must arrive: queued behind what waits
  ASSERT_TRUE(out.send(writer.fd, lost.data(), lost.size(), false));
  EXPECT_GE(out.waiting(), lost.size());
  EXPECT_FALSE(out.drain(writer.fd, net::Clock::now() + std::chrono::milliseconds(50))) << "nobody reads yet";
  std::string got;
  std::thread read_all([&] {
    char buf[4096];
    for (;;) {
      const ssize_t r = ::recv(reader.fd, buf, sizeof buf, 0);
      if (r <= 0) return;
      got.append(buf, static_cast<std::size_t>(r));
    }
  });
  EXPECT_TRUE(out.drain(writer.fd, net::Clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(out.waiting(), 0u);
  ::shutdown(writer.fd, SHUT_WR);
  read_all.join();
  // The stream: the beats taken, whole and in order, then the lost message.
  ASSERT_EQ(got.size(), sent.size() * 17 + lost.size());
  for (std::size_t k = 0; k < sent.size(); ++k) {
    ASSERT_EQ(got[k * 17], 'B') << "message " << k;
    uint32_t s2 = 0;
    std::memcpy(&s2, &got[k * 17 + 1], sizeof s2);
    ASSERT_EQ(s2, sent[k]) << "message " << k;
  }
  EXPECT_EQ(got.substr(sent.size() * 17), lost);
}

TEST(Communicator, CountsTheCollectivesItBegins) {
  HostGroup g(2);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < 2; ++r) comms.push_back(g.communicator(r));
  Context cpu;
  run_ranks(2, [&](int r) {
    for (int k = 0; k < 3; ++k) {
      Tensor t = Tensor::from_vector(std::vector<float>{1.0f + static_cast<float>(r)});
      comms[r]->allreduce(t, cpu);
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(comms[r]->collectives_begun(), 3u);
}

TEST(Rendezvous, AnUnreachableRankZeroFailsInTime) {
  // A blocking connect() to an address that drops packets waits minutes; the deadline holds.
  ProcessGroupEnv e = rank_env(2, 1, test::free_port());
  e.master_addr = "10.255.255.1";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(rendezvous_broadcast(e, {}, 1.0), Error);  // some networks answer for any address
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
}

TEST(Rendezvous, TheTimeoutComesFromTheEnvironment) {
  EXPECT_EQ(process_group_from_env().timeout_s, 300.0);
  ::setenv("GT_RENDEZVOUS_TIMEOUT", "7.5", 1);
  EXPECT_EQ(process_group_from_env().timeout_s, 7.5);
  for (const char* bad : {"0", "-1", "10x", "1e9"}) {
    ::setenv("GT_RENDEZVOUS_TIMEOUT", bad, 1);
    try {
      process_group_from_env();
      ADD_FAILURE() << bad << ": no error";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("GT_RENDEZVOUS_TIMEOUT"), std::string::npos) << err.what();
    }
  }
  ::unsetenv("GT_RENDEZVOUS_TIMEOUT");
}

struct EnvGuard {
  std::vector<std::string> names;
  void set(const std::string& n, const std::string& v) {
    names.push_back(n);
    ::setenv(n.c_str(), v.c_str(), 1);
  }
  ~EnvGuard() {
    for (auto& n : names) ::unsetenv(n.c_str());
  }
};

TEST(ProcessGroupEnv, ReadsOurVariablesThenTheLaunchers) {
  {
    ProcessGroupEnv e = process_group_from_env();
    EXPECT_EQ(e.world, 1);
    EXPECT_EQ(e.rank, 0);
  }
  {
    EnvGuard g;
    g.set("OMPI_COMM_WORLD_SIZE", "4");
    g.set("OMPI_COMM_WORLD_RANK", "3");
    g.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    g.set("GT_MASTER_ADDR", "node7");
    g.set("GT_MASTER_PORT", "4242");
    ProcessGroupEnv e = process_group_from_env();
    EXPECT_EQ(e.world, 4);
    EXPECT_EQ(e.rank, 3);
    EXPECT_EQ(e.local_rank, 1);
    EXPECT_EQ(e.master_addr, "node7");
    EXPECT_EQ(e.master_port, 4242);
    EXPECT_EQ(e.source, "OpenMPI");
  }
  {
    EnvGuard g;
    g.set("GT_WORLD_SIZE", "2");
    g.set("GT_RANK", "abc");
    try {
      process_group_from_env();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("GT_RANK"), std::string::npos) << e.what();
    }
  }
  {
    EnvGuard g;
    g.set("GT_WORLD_SIZE", "2");
    g.set("GT_RANK", "2");  // out of range
    EXPECT_THROW(process_group_from_env(), Error);
  }
}

TEST(Nccl, AllReduceOnTwoGpusMatchesTheHostSum) {
  if (!built_with_nccl()) GTEST_SKIP() << "built without NCCL";
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << cuda_device_count();
  constexpr std::size_t N = (1 << 20) + 3;
  const NcclId id = nccl_unique_id();
  std::vector<std::vector<float>> in = {random_floats(N, 1), random_floats(N, 2)}, out(2);
  std::vector<std::string> errors(2);
  run_ranks(2, [&](int r) {
    try {
      set_current_device(Device::cuda(r));
      Context ctx(Device::cuda(r));
      auto comm = make_nccl_communicator(id, 2, r, ctx);
      EXPECT_STREQ(comm->backend(), "nccl");
      Tensor t = Tensor::from_vector(in[r]).to(ctx.device(), ctx.stream());
      comm->allreduce(t, ctx);
      ctx.synchronize();
      out[r] = t.to_vector<float>();
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  });
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (std::size_t i = 0; i < N; ++i) {
    ASSERT_EQ(out[0][i], in[0][i] + in[1][i]) << i;  // two terms: the order cannot matter
    ASSERT_EQ(out[1][i], out[0][i]) << i;
  }
}

}  // namespace
}  // namespace gt
