// One node's simple PMI server: PMI-1 and PMI-2 over each rank's socketpair, barriers over the tree.
#include "pmi/pmi_server.hpp"

#include <sys/socket.h>
#include <sys/wait.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <deque>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include "hosts/rank_blocks.hpp"
#include "pmi/abandoned_segments.hpp"
#include "pmi/node_puts.hpp"
#include "pmi/process_mapping.hpp"
#include "pmi/wire.hpp"
#include "proc/process.hpp"
#include "proc/rank_env.hpp"
#include "timing/clock.hpp"
#include "util/log.hpp"
#include "wire/codec.hpp"

namespace canopy {

namespace asio = boost::asio;

namespace {

spdlog::logger& pmi_log() { return area_logger("pmi"); }

using pmi::Command;
using pmi::Wire;

Command make(std::string name) { return Command{std::move(name), {}}; }

} // namespace

struct PmiServer::Connection {
    enum class State { connected, initialized, finalized, closed };

    Connection(asio::io_context& io, long rank, long appnum) : rank(rank), appnum(appnum), socket(io) {}

    Wire wire() const { return decoder.wire(); }

    long rank;
    long appnum;   // its program's in an MPMD job
    asio::local::stream_protocol::socket socket;
    UniqueFd child_end;
    pmi::Decoder decoder;
    State state = State::connected;
    bool exited = false;
    int wait_status = 0;
    bool complained = false;              // one log line per rank for refused commands
    std::size_t pending_puts = 0;
    std::array<char, 4096> buffer{};
    std::deque<std::string> outbox;
    bool writing = false;
    std::unique_ptr<asio::steady_timer> grace;   // after its connection closed early: time to exit
};

PmiServer::PmiServer(asio::io_context& io, PmiJob job, PmiTree tree)
    : io_(io), job_(std::move(job)), tree_(std::move(tree))
{
    RankBlocks blocks(job_.ranks_per_node);
    bool on_a_node = job_.node_index >= 0 && job_.node_index < blocks.nodes();
    first_rank_ = on_a_node ? blocks.first_rank(job_.node_index) : 0;
    local_size_ = on_a_node ? blocks.local_size(job_.node_index) : 0;
    world_size_ = blocks.world_size();
    process_mapping_ = pmi::process_mapping(job_.ranks_per_node);
}

PmiServer::~PmiServer()
{
    *alive_ = false;
    stop();
}

Status PmiServer::prepare_rank(RankLaunch& launch)
{
    long rank = launch.rank;
    if (rank >= world_size_)
        return {};   // spawned through PMIx into a namespace of its own: not a simple-PMI client
    auto& env = launch.env;
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        return make_error("cannot make the PMI connection for rank {} on {}: {}", rank, job_.node,
                          std::strerror(errno));
    auto connection = std::make_shared<Connection>(io_, rank, launch.appnum);
    connection->child_end.reset(fds[1]);
    boost::system::error_code error;
    connection->socket.assign(asio::local::stream_protocol(), fds[0], error);
    if (error) {
        ::close(fds[0]);
        return make_error("cannot watch the PMI connection for rank {} on {}: {}", rank, job_.node,
                          error.message());
    }
    set_environment_value(env, "PMI_FD", std::to_string(fds[1]));
    set_environment_value(env, "PMI_RANK", std::to_string(rank));
    set_environment_value(env, "PMI_SIZE", std::to_string(world_size_));
    set_environment_value(env, "PMI_APPNUM", std::to_string(launch.appnum));
    set_environment_value(env, "PMI_LOCAL_RANK", std::to_string(rank - first_rank_));
    set_environment_value(env, "PMI_LOCAL_SIZE", std::to_string(local_size_));
    connections_[rank] = connection;
    launch.inherit_fds.push_back(fds[1]);
    read_next(connection);
    return {};
}

void PmiServer::ranks_started()
{
    for (auto& [rank, connection] : connections_)
        connection->child_end.reset();
}

void PmiServer::read_next(const std::shared_ptr<Connection>& connection)
{
    auto weak = std::weak_ptr<Connection>(connection);
    connection->socket.async_read_some(
        asio::buffer(connection->buffer), [this, weak, alive = alive_](boost::system::error_code error, std::size_t n) {
            auto c = weak.lock();
            if (!*alive || !c || c->state == Connection::State::closed)
                return;
            if (error) {
                on_closed(*c, error == asio::error::eof ? "" : error.message());
                return;
            }
            c->decoder.feed(std::string_view(c->buffer.data(), n));
            for (;;) {
                auto command = c->decoder.next();
                if (!command) {
                    // The stream cannot be read on: log why, naming the rank, and treat it as broken off.
                    pmi_log().warn("{}: {}; closing its PMI connection", rank_name(c->rank), command.error().message);
                    std::string why = command.error().message;
                    // Best effort, without waiting: the connection closes right after.
                    auto last = pmi::encode(c->wire(), make("error").add("rc", "-1").add(
                                                           c->wire() == Wire::v1 ? "msg" : "errmsg", why));
                    (void)::send(c->socket.native_handle(), last.data(), last.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
                    on_closed(*c, why);
                    return;
                }
                if (!*command)
                    break;
                on_command(*c, **command);
                if (!*alive || c->state == Connection::State::closed || closed_)
                    return;
            }
            read_next(c);
        });
}

const std::map<std::string, PmiServer::Handler, std::less<>>& PmiServer::handlers(bool v2)
{
    // PMI-1 (MPICH's simple_pmi) and PMI-2 name the same operations differently.
    static const std::map<std::string, Handler, std::less<>> v1 = {
        {"init", &PmiServer::on_init},
        {"get_maxes", &PmiServer::on_get_maxes},
        {"get_appnum", &PmiServer::on_get_appnum},
        {"get_my_kvsname", &PmiServer::on_get_kvsname},
        {"get_universe_size", &PmiServer::on_get_universe_size},
        {"put", &PmiServer::on_put},
        {"get", &PmiServer::on_get},
        {"barrier_in", &PmiServer::on_barrier},
        {"publish_name", &PmiServer::on_publish},
        {"unpublish_name", &PmiServer::on_unpublish},
        {"lookup_name", &PmiServer::on_lookup},
        {"abort", &PmiServer::on_abort},
        {"finalize", &PmiServer::on_finalize},
        {"spawn", &PmiServer::on_not_supported},
    };
    static const std::map<std::string, Handler, std::less<>> v2_table = {
        {"fullinit", &PmiServer::on_fullinit},
        {"job-getid", &PmiServer::on_job_getid},
        {"info-getjobattr", &PmiServer::on_get_job_attr},
        {"info-putnodeattr", &PmiServer::on_put_node_attr},
        {"info-getnodeattr", &PmiServer::on_get_node_attr},
        {"kvs-put", &PmiServer::on_put},
        {"kvs-get", &PmiServer::on_get},
        {"kvs-fence", &PmiServer::on_barrier},
        {"name-publish", &PmiServer::on_publish},
        {"name-unpublish", &PmiServer::on_unpublish},
        {"name-lookup", &PmiServer::on_lookup},
        {"abort", &PmiServer::on_abort},
        {"finalize", &PmiServer::on_finalize},
        {"spawn", &PmiServer::on_not_supported},
        {"job-connect", &PmiServer::on_not_supported},
        {"job-disconnect", &PmiServer::on_not_supported},
    };
    return v2 ? v2_table : v1;
}

void PmiServer::on_command(Connection& c, const Command& command)
{
    const auto& table = handlers(c.wire() == Wire::v2);
    auto handler = table.find(command.name);
    if (handler == table.end()) {
        refuse(c, command, fmt::format("unknown PMI-{} command '{}'", c.wire() == Wire::v1 ? 1 : 2, command.name));
        return;
    }
    bool opens = command.name == "init" || command.name == "fullinit";
    if (!opens && c.state == Connection::State::connected) {
        refuse(c, command, fmt::format("'{}' before init", command.name));
        return;
    }
    if (c.state == Connection::State::finalized) {
        refuse(c, command, fmt::format("'{}' after finalize", command.name));
        return;
    }
    (this->*handler->second)(c, command);
}

void PmiServer::reply(Connection& c, const Command& response)
{
    if (c.state == Connection::State::closed)
        return;
    c.outbox.push_back(pmi::encode(c.wire(), response));
    flush(connections_.at(c.rank));
}

void PmiServer::flush(const std::shared_ptr<Connection>& c)
{
    if (c->writing || c->outbox.empty() || c->state == Connection::State::closed)
        return;
    c->writing = true;
    asio::async_write(c->socket, asio::buffer(c->outbox.front()),
                      [this, c, alive = alive_](boost::system::error_code error, std::size_t) {
                          c->writing = false;
                          if (!*alive)
                              return;
                          c->outbox.pop_front();
                          if (error)
                              c->outbox.clear();   // the read side sees the close and reports it
                          else
                              flush(c);
                      });
}

void PmiServer::refuse(Connection& c, const Command& command, const std::string& why)
{
    if (!c.complained) {
        c.complained = true;
        pmi_log().warn("{}: {}", rank_name(c.rank), why);
    }
    // PMI-1's answer names are the command's own plus a suffix; an unknown command gets a generic one.
    static const std::map<std::string, std::string, std::less<>> v1_answers = {
        {"init", "response_to_init"}, {"get_maxes", "maxes"},         {"get_appnum", "appnum"},
        {"get_my_kvsname", "my_kvsname"}, {"get_universe_size", "universe_size"}, {"put", "put_result"},
        {"get", "get_result"},        {"barrier_in", "barrier_out"},  {"publish_name", "publish_result"},
        {"unpublish_name", "unpublish_result"}, {"lookup_name", "lookup_result"}, {"finalize", "finalize_ack"},
        {"spawn", "spawn_result"},
    };
    Command answer;
    if (c.wire() == Wire::v1) {
        auto name = v1_answers.find(command.name);
        answer = make(name == v1_answers.end() ? "error" : name->second);
        answer.add("rc", "-1").add("msg", why);
    } else {
        answer = make(command.name + "-response");
        answer.add("rc", "-1").add("errmsg", why);
    }
    reply(c, answer);
}

std::string PmiServer::rank_name(long rank) const { return fmt::format("rank {} on {}", rank, job_.node); }

bool PmiServer::within_limit(Connection& c, const Command& command, const std::string& key, std::uint64_t bytes)
{
    if (!tree_.keep || tree_.keep(c.rank, key, bytes, fmt::format("PMI's {}", command.name)))
        return true;
    refuse(c, command, fmt::format("'{}' takes the rank past the job's limit on what a rank may store", command.name));
    return false;
}

void PmiServer::on_init(Connection& c, const Command& command)
{
    auto version = command.find("pmi_version");
    if (c.state != Connection::State::connected) {
        refuse(c, command, "a second init");
        return;
    }
    if (version == "1" || version == "2") {
        bool v2 = version == "2";
        auto answer = make("response_to_init");
        answer.add("pmi_version", v2 ? "2" : "1").add("pmi_subversion", v2 ? "0" : "1").add("rc", "0");
        reply(c, answer);
        if (v2) {
            c.decoder.use_v2();   // the rest comes framed, starting with fullinit
            return;
        }
        initialized(c);
        return;
    }
    auto answer = make("response_to_init");
    answer.add("pmi_version", "1").add("pmi_subversion", "1").add("rc", "-1");
    answer.add("msg", fmt::format("PMI version {} is not served; canopy serves 1 and 2",
                                  version ? std::string(*version) : std::string("(none)")));
    pmi_log().warn("{}: asked for PMI version {}", rank_name(c.rank), version ? std::string(*version) : "(none)");
    reply(c, answer);
}

void PmiServer::on_fullinit(Connection& c, const Command& command)
{
    if (c.state != Connection::State::connected) {
        refuse(c, command, "a second fullinit");
        return;
    }
    auto claimed = command.find("pmirank");
    if (claimed && *claimed != std::to_string(c.rank)) {
        refuse(c, command, fmt::format("fullinit claims rank {}, but this connection is rank {}", *claimed, c.rank));
        return;
    }
    auto answer = make("fullinit-response");
    answer.add("rc", "0").add("pmi-version", "2").add("pmi-subversion", "0");
    answer.add("rank", std::to_string(c.rank)).add("size", std::to_string(world_size_));
    answer.add("appnum", std::to_string(c.appnum));
    answer.add("debugged", "FALSE").add("pmiverbose", "FALSE");
    reply(c, answer);
    initialized(c);
}

void PmiServer::initialized(Connection& c)
{
    c.state = Connection::State::initialized;
    if (tree_.mark)
        tree_.mark(c.rank, "pmi_init", timing::now_ns());
}

void PmiServer::on_get_maxes(Connection& c, const Command&)
{
    auto answer = make("maxes");
    answer.add("rc", "0").add("kvsname_max", std::to_string(max_kvsname));
    answer.add("keylen_max", std::to_string(max_key)).add("vallen_max", std::to_string(max_value));
    reply(c, answer);
}

void PmiServer::on_get_appnum(Connection& c, const Command&)
{
    reply(c, make("appnum").add("rc", "0").add("appnum", std::to_string(c.appnum)));
}

void PmiServer::on_get_kvsname(Connection& c, const Command&)
{
    reply(c, make("my_kvsname").add("rc", "0").add("kvsname", job_.kvsname));
}

void PmiServer::on_get_universe_size(Connection& c, const Command&)
{
    reply(c, make("universe_size").add("rc", "0").add("size", std::to_string(world_size_)));
}

void PmiServer::on_job_getid(Connection& c, const Command&)
{
    reply(c, make("job-getid-response").add("rc", "0").add("jobid", job_.kvsname));
}

void PmiServer::on_put(Connection& c, const Command& command)
{
    bool v1 = c.wire() == Wire::v1;
    auto key = command.find("key");
    auto value = command.find("value");
    auto kvsname = command.find("kvsname");
    if (!key || !value || key->empty()) {
        refuse(c, command, "put without a key and a value");
        return;
    }
    if (v1 && kvsname && *kvsname != job_.kvsname) {
        refuse(c, command, fmt::format("put into kvs '{}', but this job's is '{}'", *kvsname, job_.kvsname));
        return;
    }
    if (key->size() > max_key || value->size() > max_value) {
        refuse(c, command, fmt::format("put of a {}-byte key or {}-byte value, over the limits of {} and {}",
                                       key->size(), value->size(), max_key, max_value));
        return;
    }
    if (c.pending_puts >= max_pending_puts) {
        refuse(c, command, fmt::format("more than {} puts before a barrier", max_pending_puts));
        return;
    }
    if (!within_limit(c, command, "pmi:" + std::string(*key), key->size() + value->size()))
        return;
    ++c.pending_puts;
    pending_puts_.insert_or_assign(std::string(*key), std::string(*value));
    reply(c, make(v1 ? "put_result" : "kvs-put-response").add("rc", "0"));
}

void PmiServer::on_get(Connection& c, const Command& command)
{
    bool v1 = c.wire() == Wire::v1;
    auto key = command.find("key");
    if (!key) {
        refuse(c, command, "get without a key");
        return;
    }
    std::optional<std::string> value = job_attribute(*key);
    if (!value) {
        if (auto found = kvs_.find(*key))
            value = std::string(*found);
        else if (auto put = pending_puts_.find(*key); put != pending_puts_.end())
            value = put->second;   // put on this node, not yet through a barrier
    }
    if (v1) {
        if (value)
            reply(c, make("get_result").add("rc", "0").add("value", *value));
        else
            reply(c, make("get_result").add("rc", "-1").add("msg", fmt::format("key_{}_not_found", *key)));
        return;
    }
    auto answer = make("kvs-get-response").add("rc", "0").add("found", value ? "TRUE" : "FALSE");
    if (value)
        answer.add("value", *value);
    reply(c, answer);
}

std::optional<std::string> PmiServer::job_attribute(std::string_view key) const
{
    // MPICH before 4.2 reads at most 1023 bytes a message: a longer map is left out, and MPICH then learns the
    // node layout by exchanging host names.
    if (key == "PMI_process_mapping" && process_mapping_.size() <= 900)
        return process_mapping_;
    if (key == "universeSize")
        return std::to_string(world_size_);
    return std::nullopt;
}

void PmiServer::on_get_job_attr(Connection& c, const Command& command)
{
    auto key = command.find("key");
    auto value = key ? job_attribute(*key) : std::nullopt;
    auto answer = make("info-getjobattr-response").add("rc", "0").add("found", value ? "TRUE" : "FALSE");
    if (value)
        answer.add("value", *value);
    reply(c, answer);
}

void PmiServer::on_put_node_attr(Connection& c, const Command& command)
{
    auto key = command.find("key");
    auto value = command.find("value");
    if (!key || !value || key->empty() || key->size() > max_key || value->size() > max_value) {
        refuse(c, command, "info-putnodeattr needs a key and a value within the limits");
        return;
    }
    std::string name(*key);
    if (!within_limit(c, command, "pmi-node:" + name, key->size() + value->size()))
        return;
    node_attrs_.insert_or_assign(name, std::string(*value));
    reply(c, make("info-putnodeattr-response").add("rc", "0"));
    // Ranks waiting for this attribute get it now.
    auto [first, last] = node_attr_waiters_.equal_range(name);
    std::vector<long> waiting;
    for (auto it = first; it != last; ++it)
        waiting.push_back(it->second);
    node_attr_waiters_.erase(first, last);
    for (long rank : waiting)
        if (auto waiter = connections_.find(rank); waiter != connections_.end())
            reply(*waiter->second,
                  make("info-getnodeattr-response").add("rc", "0").add("found", "TRUE").add("value", std::string(*value)));
}

void PmiServer::on_get_node_attr(Connection& c, const Command& command)
{
    auto key = command.find("key");
    if (!key) {
        refuse(c, command, "info-getnodeattr without a key");
        return;
    }
    if (auto found = node_attrs_.find(*key); found != node_attrs_.end()) {
        reply(c, make("info-getnodeattr-response").add("rc", "0").add("found", "TRUE").add("value", found->second));
        return;
    }
    if (command.find("wait") == "TRUE") {
        node_attr_waiters_.emplace(std::string(*key), c.rank);
        return;
    }
    reply(c, make("info-getnodeattr-response").add("rc", "0").add("found", "FALSE"));
}

void PmiServer::on_barrier(Connection& c, const Command& command)
{
    if (in_barrier_.contains(c.rank)) {
        refuse(c, command, "a second barrier while in one");
        return;
    }
    in_barrier_.insert(c.rank);
    c.pending_puts = 0;
    maybe_start_fence();
    check_barrier();
}

void PmiServer::maybe_start_fence()
{
    if (fence_running_ || failed_ || static_cast<long>(in_barrier_.size()) < local_size_)
        return;
    fence_running_ = true;
    Bytes local = pmi::encode_node_puts(pending_puts_);
    pending_puts_.clear();
    tree_.fence(std::move(local), [this, alive = alive_](Status status, Bytes result) {
        if (*alive)
            fence_done(std::move(status), std::move(result));
    });
}

void PmiServer::fence_done(Status status, Bytes result)
{
    fence_running_ = false;
    if (status)
        status = kvs_.add(std::move(result));
    std::set<long> waiting = std::move(in_barrier_);
    in_barrier_.clear();
    if (!status)
        pmi_log().debug("PMI barrier on {} failed: {}", job_.node, status.error().message);
    for (long rank : waiting) {
        auto it = connections_.find(rank);
        if (it == connections_.end())
            continue;
        Connection& c = *it->second;
        bool v1 = c.wire() == Wire::v1;
        auto answer = make(v1 ? "barrier_out" : "kvs-fence-response");
        answer.add("rc", status ? "0" : "-1");
        if (!status)
            answer.add(v1 ? "msg" : "errmsg", status.error().message);
        reply(c, answer);
    }
}

std::function<void(const Command&)> PmiServer::reply_later(long rank)
{
    return [this, rank, alive = alive_](const Command& answer) {
        auto it = connections_.find(rank);
        if (*alive && it != connections_.end())
            reply(*it->second, answer);
    };
}

namespace {

// A publish or unpublish answer; pre-4 MPICH PMI-1 clients check info=, later ones rc=.
Command name_service_answer(bool v1, const char* v1_name, const char* v2_name, const Status& status)
{
    auto answer = make(v1 ? v1_name : v2_name).add("rc", status ? "0" : "1");
    if (!status)
        answer.add(v1 ? "msg" : "errmsg", status.error().message);
    if (v1)
        answer.add("info", status ? "ok" : "fail");
    return answer;
}

} // namespace

void PmiServer::on_publish(Connection& c, const Command& command)
{
    bool v1 = c.wire() == Wire::v1;
    auto name = command.find(v1 ? "service" : "name");
    auto port = command.find("port");
    if (!name || !port) {
        refuse(c, command, "publish without a service name and a port");
        return;
    }
    if (!within_limit(c, command, "pmi-name:" + std::string(*name), name->size() + port->size()))
        return;
    tree_.publish(std::string(*name), std::string(*port), [v1, answer = reply_later(c.rank)](Status status) {
        answer(name_service_answer(v1, "publish_result", "name-publish-response", status));
    });
}

void PmiServer::on_unpublish(Connection& c, const Command& command)
{
    bool v1 = c.wire() == Wire::v1;
    auto name = command.find(v1 ? "service" : "name");
    if (!name) {
        refuse(c, command, "unpublish without a service name");
        return;
    }
    if (tree_.drop)
        tree_.drop(c.rank, "pmi-name:" + std::string(*name));
    tree_.unpublish(std::string(*name), [v1, answer = reply_later(c.rank)](Status status) {
        answer(name_service_answer(v1, "unpublish_result", "name-unpublish-response", status));
    });
}

void PmiServer::on_lookup(Connection& c, const Command& command)
{
    bool v1 = c.wire() == Wire::v1;
    auto name = command.find(v1 ? "service" : "name");
    if (!name) {
        refuse(c, command, "lookup without a service name");
        return;
    }
    std::string service(*name);
    tree_.lookup(service, [v1, service, answer = reply_later(c.rank)](Status status, std::optional<std::string> port) {
        Command result = make(v1 ? "lookup_result" : "name-lookup-response");
        if (status && port) {
            result.add("rc", "0");
            // MPICH 4's PMI-2 client reads port, older clients and Slurm's read value.
            if (v1)
                result.add("info", "ok").add("port", *port);
            else
                result.add("found", "TRUE").add("port", *port).add("value", *port);
        } else {
            std::string why = status ? fmt::format("service '{}' is not published", service) : status.error().message;
            result.add("rc", "1").add(v1 ? "msg" : "errmsg", why);
            result.add(v1 ? "info" : "found", v1 ? "fail" : "FALSE");
        }
        answer(result);
    });
}

void PmiServer::on_abort(Connection& c, const Command& command)
{
    // PMI-1 sends exitcode (MPI_Abort's errorcode); MPICH 4's PMI-2 client exitcode=-1 and message, older ones
    // isworld and msg. A job that aborted never ends with 0, nor with a code the shell reads as a signal.
    int code = 1;
    if (auto text = command.find("exitcode")) {
        try {
            code = std::stoi(std::string(*text));
        } catch (const std::exception&) {
        }
    }
    if (code < 1 || code > 125)
        code = 1;
    std::string message(command.find("message").value_or(command.find("msg").value_or("")));
    fail(c.rank, message.empty() || message == "abort"
                     ? fmt::format("{} called PMI_Abort with exit code {}", rank_name(c.rank), code)
                     : fmt::format("{} called PMI_Abort with exit code {}: {}", rank_name(c.rank), code, message),
         code);
}

void PmiServer::on_finalize(Connection& c, const Command&)
{
    c.state = Connection::State::finalized;
    reply(c, make(c.wire() == Wire::v1 ? "finalize_ack" : "finalize-response").add("rc", "0"));
    if (tree_.mark)
        tree_.mark(c.rank, "pmi_finalize", timing::now_ns());
    check_barrier();
}

void PmiServer::on_not_supported(Connection& c, const Command& command)
{
    // Dynamic processes over simple PMI: the caller gets an error at once, never a wait.
    bool v1 = c.wire() == Wire::v1;
    // PMI-1 sends a spawn as one mcmd block per command and waits for one answer after the last.
    if (v1 && command.find("totspawns") && command.find("spawnssofar") != command.find("totspawns"))
        return;
    auto answer = make(v1 ? command.name + "_result" : command.name + "-response");
    std::string why = fmt::format("PMI {} is not supported by canopy", command.name);
    answer.add("rc", "-1").add(v1 ? "msg" : "errmsg", why);
    if (!c.complained) {
        c.complained = true;
        pmi_log().warn("{}: asked for PMI {}, which canopy does not support", rank_name(c.rank), command.name);
    }
    reply(c, answer);
}

void PmiServer::on_closed(Connection& c, const std::string& why)
{
    auto state = c.state;
    c.state = Connection::State::closed;
    boost::system::error_code ignored;
    c.socket.close(ignored);
    for (auto it = node_attr_waiters_.begin(); it != node_attr_waiters_.end();)
        it = it->second == c.rank ? node_attr_waiters_.erase(it) : std::next(it);
    in_barrier_.erase(c.rank);   // it can no longer be told the barrier is over
    if (state != Connection::State::initialized) {
        check_barrier();   // never spoke PMI, or finalized: only a barrier waiting on it matters
        return;
    }
    rank_left_in_mpi_ = true;
    if (!why.empty())
        pmi_log().debug("{}: PMI connection error: {}", rank_name(c.rank), why);
    if (c.exited) {
        check_barrier();
        return;
    }
    // A rank that closes its connection between init and finalize has broken off, but it may just be dying:
    // give its exit a moment to be reported with its real status before blaming the connection.
    c.grace = std::make_unique<asio::steady_timer>(io_, exit_grace);
    long rank = c.rank;
    c.grace->async_wait([this, rank, alive = alive_](const boost::system::error_code& error) {
        auto it = connections_.find(rank);
        if (error || !*alive || it == connections_.end() || it->second->exited)
            return;
        fail(rank, fmt::format("{} closed its PMI connection (PMI_FD) before PMI_Finalize", rank_name(rank)));
    });
}

void PmiServer::rank_exited(long rank, int wait_status)
{
    auto it = connections_.find(rank);
    if (it == connections_.end())
        return;
    Connection& c = *it->second;
    c.exited = true;
    c.wait_status = wait_status;
    if (c.grace)
        c.grace->cancel();
    check_barrier();
}

void PmiServer::check_barrier()
{
    if (in_barrier_.empty() || failed_ || closed_)
        return;
    for (const auto& [rank, connection] : connections_) {
        const Connection& c = *connection;
        if (in_barrier_.contains(rank))
            continue;
        if (c.exited && c.wait_status != 0)
            return;   // the daemon reports its exit, which ends the job
        std::string why;
        if (c.state == Connection::State::finalized)
            why = "has called PMI_Finalize";
        else if (c.exited)
            why = c.state == Connection::State::closed && c.grace ? "exited without PMI_Finalize"
                                                                   : "exited without joining it";
        else
            continue;   // still running, or closed early and within its grace: it may yet arrive or exit
        fail(rank, fmt::format("{} {}, but ranks on {} wait for it in a PMI barrier", rank_name(rank), why,
                               job_.node));
        return;
    }
}

void PmiServer::fail(long rank, std::string message, int exit_code)
{
    if (failed_ || closed_)
        return;
    failed_ = true;
    pmi_log().debug("{}", message);
    tree_.fail(rank, exit_code, std::move(message));
}

void PmiServer::stop()
{
    if (closed_)
        return;
    closed_ = true;
    for (auto& [rank, connection] : connections_)
        rank_left_in_mpi_ |= connection->state == Connection::State::initialized;
    for (auto& [rank, connection] : connections_) {
        boost::system::error_code ignored;
        connection->state = Connection::State::closed;
        connection->socket.close(ignored);
        connection->child_end.reset();
        if (connection->grace)
            connection->grace->cancel();
    }
    node_attr_waiters_.clear();
    // Only a rank that ended between PMI init and finalize can have left a segment. Listing the directories costs
    // O(files in them), and thousands of simulated nodes share them: each one listing made the job's end O(N^2).
    if (!rank_left_in_mpi_)
        return;
    for (const auto& directory : mpich_segment_directories)
        for (const auto& path : remove_abandoned_segments(directory, mpich_segment_prefix, started_))
            pmi_log().debug("{}: removed {}, which a rank made in MPI_Init and died before MPICH unlinked it",
                            job_.node, path);
}

} // namespace canopy
