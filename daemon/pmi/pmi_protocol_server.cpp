// One node's simple PMI server with no I/O: PMI-1 and PMI-2 semantics, kvs, barriers, the name service, abort.
#include "pmi/pmi_protocol_server.hpp"

#include <fmt/format.h>

#include "hosts/rank_blocks.hpp"
#include "pmi/node_puts.hpp"
#include "pmi/process_mapping.hpp"
#include "util/log.hpp"

namespace canopy {

namespace {

spdlog::logger& pmi_log() { return area_logger("pmi"); }

using pmi::Command;
using pmi::Wire;

Command make(std::string name) { return Command{std::move(name), {}}; }

} // namespace

PmiProtocolServer::PmiProtocolServer(PmiJob job, PmiProtocolOps& ops) : job_(std::move(job)), ops_(ops)
{
    RankBlocks blocks(job_.ranks_per_node);
    bool on_a_node = job_.node_index >= 0 && job_.node_index < blocks.nodes();
    first_rank_ = on_a_node ? blocks.first_rank(job_.node_index) : 0;
    local_size_ = on_a_node ? blocks.local_size(job_.node_index) : 0;
    world_size_ = blocks.world_size();
    process_mapping_ = pmi::process_mapping(job_.ranks_per_node);
}

void PmiProtocolServer::add_rank(long rank, long appnum)
{
    Rank& added = ranks_[rank];
    added.rank = rank;
    added.appnum = appnum;
}

bool PmiProtocolServer::open(long rank) const
{
    auto it = ranks_.find(rank);
    return !stopped_ && it != ranks_.end() && it->second.state != Rank::State::closed;
}

void PmiProtocolServer::receive(long rank, std::string_view bytes)
{
    if (!open(rank))
        return;
    Rank& r = ranks_.at(rank);
    r.decoder.feed(bytes);
    while (!stopped_ && r.state != Rank::State::closed) {
        auto command = r.decoder.next();
        if (!command) {
            unreadable(r, command.error().message);
            return;
        }
        if (!*command)
            return;
        on_command(r, **command);
    }
}

void PmiProtocolServer::unreadable(Rank& r, const std::string& why)
{
    pmi_log().warn("{}: {}; closing its PMI connection", rank_name(r.rank), why);
    auto last = make("error").add("rc", "-1").add(r.wire() == Wire::v1 ? "msg" : "errmsg", why);
    ops_.hang_up(r.rank, pmi::encode(r.wire(), last));
    connection_closed(r.rank, why);
}

const std::map<std::string, PmiProtocolServer::Handler, std::less<>>& PmiProtocolServer::handlers(Wire wire)
{
    // PMI-1 (MPICH's simple_pmi) and PMI-2 name the same operations differently.
    using S = PmiProtocolServer;
    static const std::map<std::string, Handler, std::less<>> v1 = {
        {"init", &S::on_init},
        {"get_maxes", &S::on_get_maxes},
        {"get_appnum", &S::on_get_appnum},
        {"get_my_kvsname", &S::on_get_kvsname},
        {"get_universe_size", &S::on_get_universe_size},
        {"put", &S::on_put},
        {"get", &S::on_get},
        {"barrier_in", &S::on_barrier},
        {"publish_name", &S::on_publish},
        {"unpublish_name", &S::on_unpublish},
        {"lookup_name", &S::on_lookup},
        {"abort", &S::on_abort},
        {"finalize", &S::on_finalize},
        {"spawn", &S::on_not_supported},
    };
    static const std::map<std::string, Handler, std::less<>> v2 = {
        {"fullinit", &S::on_fullinit},
        {"job-getid", &S::on_job_getid},
        {"info-getjobattr", &S::on_get_job_attr},
        {"info-putnodeattr", &S::on_put_node_attr},
        {"info-getnodeattr", &S::on_get_node_attr},
        {"kvs-put", &S::on_put},
        {"kvs-get", &S::on_get},
        {"kvs-fence", &S::on_barrier},
        {"name-publish", &S::on_publish},
        {"name-unpublish", &S::on_unpublish},
        {"name-lookup", &S::on_lookup},
        {"abort", &S::on_abort},
        {"finalize", &S::on_finalize},
        {"spawn", &S::on_not_supported},
        {"job-connect", &S::on_not_supported},
        {"job-disconnect", &S::on_not_supported},
    };
    return wire == Wire::v2 ? v2 : v1;
}

void PmiProtocolServer::on_command(Rank& r, const Command& command)
{
    const auto& table = handlers(r.wire());
    auto handler = table.find(command.name);
    if (handler == table.end()) {
        refuse(r, command, fmt::format("unknown PMI-{} command '{}'", r.wire() == Wire::v1 ? 1 : 2, command.name));
        return;
    }
    bool opens = command.name == "init" || command.name == "fullinit";
    if (!opens && r.state == Rank::State::connected) {
        refuse(r, command, fmt::format("'{}' before init", command.name));
        return;
    }
    if (r.state == Rank::State::finalized) {
        refuse(r, command, fmt::format("'{}' after finalize", command.name));
        return;
    }
    (this->*handler->second)(r, command);
}

void PmiProtocolServer::reply(Rank& r, const Command& response)
{
    if (r.state == Rank::State::closed || stopped_)
        return;
    ops_.send(r.rank, pmi::encode(r.wire(), response));
}

std::function<void(const Command&)> PmiProtocolServer::reply_later(long rank)
{
    return [this, rank](const Command& answer) {
        if (auto it = ranks_.find(rank); it != ranks_.end())
            reply(it->second, answer);
    };
}

void PmiProtocolServer::refuse(Rank& r, const Command& command, const std::string& why)
{
    if (!r.complained) {
        r.complained = true;
        pmi_log().warn("{}: {}", rank_name(r.rank), why);
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
    if (r.wire() == Wire::v1) {
        auto name = v1_answers.find(command.name);
        answer = make(name == v1_answers.end() ? "error" : name->second);
        answer.add("rc", "-1").add("msg", why);
    } else {
        answer = make(command.name + "-response");
        answer.add("rc", "-1").add("errmsg", why);
    }
    reply(r, answer);
}

std::string PmiProtocolServer::rank_name(long rank) const { return fmt::format("rank {} on {}", rank, job_.node); }

bool PmiProtocolServer::within_limit(Rank& r, const Command& command, const std::string& key, std::uint64_t bytes)
{
    if (ops_.keep(r.rank, key, bytes, fmt::format("PMI's {}", command.name)))
        return true;
    refuse(r, command, fmt::format("'{}' takes the rank past the job's limit on what a rank may store", command.name));
    return false;
}

void PmiProtocolServer::on_init(Rank& r, const Command& command)
{
    auto version = command.find("pmi_version");
    if (r.state != Rank::State::connected) {
        refuse(r, command, "a second init");
        return;
    }
    if (version == "1" || version == "2") {
        bool v2 = version == "2";
        auto answer = make("response_to_init");
        answer.add("pmi_version", v2 ? "2" : "1").add("pmi_subversion", v2 ? "0" : "1").add("rc", "0");
        reply(r, answer);
        if (v2) {
            r.decoder.use_v2();   // the rest comes framed, starting with fullinit
            return;
        }
        initialized(r);
        return;
    }
    std::string asked = version ? std::string(*version) : std::string("(none)");
    auto answer = make("response_to_init");
    answer.add("pmi_version", "1").add("pmi_subversion", "1").add("rc", "-1");
    answer.add("msg", fmt::format("PMI version {} is not served; canopy serves 1 and 2", asked));
    pmi_log().warn("{}: asked for PMI version {}", rank_name(r.rank), asked);
    reply(r, answer);
}

void PmiProtocolServer::on_fullinit(Rank& r, const Command& command)
{
    if (r.state != Rank::State::connected) {
        refuse(r, command, "a second fullinit");
        return;
    }
    auto claimed = command.find("pmirank");
    if (claimed && *claimed != std::to_string(r.rank)) {
        refuse(r, command, fmt::format("fullinit claims rank {}, but this connection is rank {}", *claimed, r.rank));
        return;
    }
    auto answer = make("fullinit-response");
    answer.add("rc", "0").add("pmi-version", "2").add("pmi-subversion", "0");
    answer.add("rank", std::to_string(r.rank)).add("size", std::to_string(world_size_));
    answer.add("appnum", std::to_string(r.appnum));
    answer.add("debugged", "FALSE").add("pmiverbose", "FALSE");
    reply(r, answer);
    initialized(r);
}

void PmiProtocolServer::initialized(Rank& r)
{
    r.state = Rank::State::initialized;
    ops_.mark(r.rank, "pmi_init");
}

void PmiProtocolServer::on_get_maxes(Rank& r, const Command&)
{
    auto answer = make("maxes");
    answer.add("rc", "0").add("kvsname_max", std::to_string(max_kvsname));
    answer.add("keylen_max", std::to_string(max_key)).add("vallen_max", std::to_string(max_value));
    reply(r, answer);
}

void PmiProtocolServer::on_get_appnum(Rank& r, const Command&)
{
    reply(r, make("appnum").add("rc", "0").add("appnum", std::to_string(r.appnum)));
}

void PmiProtocolServer::on_get_kvsname(Rank& r, const Command&)
{
    reply(r, make("my_kvsname").add("rc", "0").add("kvsname", job_.kvsname));
}

void PmiProtocolServer::on_get_universe_size(Rank& r, const Command&)
{
    reply(r, make("universe_size").add("rc", "0").add("size", std::to_string(world_size_)));
}

void PmiProtocolServer::on_job_getid(Rank& r, const Command&)
{
    reply(r, make("job-getid-response").add("rc", "0").add("jobid", job_.kvsname));
}
void PmiProtocolServer::on_put(Rank& r, const Command& command)
{
    bool v1 = r.wire() == Wire::v1;
    auto key = command.find("key");
    auto value = command.find("value");
    auto kvsname = command.find("kvsname");
    if (!key || !value || key->empty()) {
        refuse(r, command, "put without a key and a value");
        return;
    }
    if (v1 && kvsname && *kvsname != job_.kvsname) {
        refuse(r, command, fmt::format("put into kvs '{}', but this job's is '{}'", *kvsname, job_.kvsname));
        return;
    }
    if (key->size() > max_key || value->size() > max_value) {
        refuse(r, command, fmt::format("put of a {}-byte key or {}-byte value, over the limits of {} and {}",
                                       key->size(), value->size(), max_key, max_value));
        return;
    }
    if (r.pending_puts >= max_pending_puts) {
        refuse(r, command, fmt::format("more than {} puts before a barrier", max_pending_puts));
        return;
    }
    if (!within_limit(r, command, "pmi:" + std::string(*key), key->size() + value->size()))
        return;
    ++r.pending_puts;
    pending_puts_.insert_or_assign(std::string(*key), std::string(*value));
    reply(r, make(v1 ? "put_result" : "kvs-put-response").add("rc", "0"));
}

void PmiProtocolServer::on_get(Rank& r, const Command& command)
{
    bool v1 = r.wire() == Wire::v1;
    auto key = command.find("key");
    if (!key) {
        refuse(r, command, "get without a key");
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
            reply(r, make("get_result").add("rc", "0").add("value", *value));
        else
            reply(r, make("get_result").add("rc", "-1").add("msg", fmt::format("key_{}_not_found", *key)));
        return;
    }
    auto answer = make("kvs-get-response").add("rc", "0").add("found", value ? "TRUE" : "FALSE");
    if (value)
        answer.add("value", *value);
    reply(r, answer);
}

std::optional<std::string> PmiProtocolServer::job_attribute(std::string_view key) const
{
    // MPICH before 4.2 reads at most 1023 bytes a message: a longer map is left out, and MPICH then learns the
    // node layout by exchanging host names.
    if (key == "PMI_process_mapping" && process_mapping_.size() <= 900)
        return process_mapping_;
    if (key == "universeSize")
        return std::to_string(world_size_);
    return std::nullopt;
}

void PmiProtocolServer::on_get_job_attr(Rank& r, const Command& command)
{
    auto key = command.find("key");
    auto value = key ? job_attribute(*key) : std::nullopt;
    auto answer = make("info-getjobattr-response").add("rc", "0").add("found", value ? "TRUE" : "FALSE");
    if (value)
        answer.add("value", *value);
    reply(r, answer);
}

void PmiProtocolServer::on_put_node_attr(Rank& r, const Command& command)
{
    auto key = command.find("key");
    auto value = command.find("value");
    if (!key || !value || key->empty() || key->size() > max_key || value->size() > max_value) {
        refuse(r, command, "info-putnodeattr needs a key and a value within the limits");
        return;
    }
    std::string name(*key);
    if (!within_limit(r, command, "pmi-node:" + name, key->size() + value->size()))
        return;
    node_attrs_.insert_or_assign(name, std::string(*value));
    reply(r, make("info-putnodeattr-response").add("rc", "0"));
    // Ranks waiting for this attribute get it now.
    auto [first, last] = node_attr_waiters_.equal_range(name);
    std::vector<long> waiting;
    for (auto it = first; it != last; ++it)
        waiting.push_back(it->second);
    node_attr_waiters_.erase(first, last);
    for (long rank : waiting)
        if (auto waiter = ranks_.find(rank); waiter != ranks_.end())
            reply(waiter->second, make("info-getnodeattr-response").add("rc", "0").add("found", "TRUE").add(
                                      "value", std::string(*value)));
}

void PmiProtocolServer::on_get_node_attr(Rank& r, const Command& command)
{
    auto key = command.find("key");
    if (!key) {
        refuse(r, command, "info-getnodeattr without a key");
        return;
    }
    if (auto found = node_attrs_.find(*key); found != node_attrs_.end()) {
        reply(r, make("info-getnodeattr-response").add("rc", "0").add("found", "TRUE").add("value", found->second));
        return;
    }
    if (command.find("wait") == "TRUE") {
        node_attr_waiters_.emplace(std::string(*key), r.rank);
        return;
    }
    reply(r, make("info-getnodeattr-response").add("rc", "0").add("found", "FALSE"));
}

void PmiProtocolServer::on_barrier(Rank& r, const Command& command)
{
    if (in_barrier_.contains(r.rank)) {
        refuse(r, command, "a second barrier while in one");
        return;
    }
    in_barrier_.insert(r.rank);
    r.pending_puts = 0;
    maybe_start_fence();
    check_barrier();
}

void PmiProtocolServer::maybe_start_fence()
{
    if (fence_running_ || failed_ || static_cast<long>(in_barrier_.size()) < local_size_)
        return;
    fence_running_ = true;
    Bytes local = pmi::encode_node_puts(pending_puts_);
    pending_puts_.clear();
    ops_.fence(std::move(local),
               [this](Status status, Bytes result) { fence_done(std::move(status), std::move(result)); });
}

void PmiProtocolServer::fence_done(Status status, Bytes result)
{
    fence_running_ = false;
    if (status)
        status = kvs_.add(std::move(result));
    std::set<long> waiting = std::move(in_barrier_);
    in_barrier_.clear();
    if (!status)
        pmi_log().debug("PMI barrier on {} failed: {}", job_.node, status.error().message);
    for (long rank : waiting) {
        auto it = ranks_.find(rank);
        if (it == ranks_.end())
            continue;
        Rank& r = it->second;
        bool v1 = r.wire() == Wire::v1;
        auto answer = make(v1 ? "barrier_out" : "kvs-fence-response");
        answer.add("rc", status ? "0" : "-1");
        if (!status)
            answer.add(v1 ? "msg" : "errmsg", status.error().message);
        reply(r, answer);
    }
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

void PmiProtocolServer::on_publish(Rank& r, const Command& command)
{
    bool v1 = r.wire() == Wire::v1;
    auto name = command.find(v1 ? "service" : "name");
    auto port = command.find("port");
    if (!name || !port) {
        refuse(r, command, "publish without a service name and a port");
        return;
    }
    if (!within_limit(r, command, "pmi-name:" + std::string(*name), name->size() + port->size()))
        return;
    ops_.publish(std::string(*name), std::string(*port), [v1, answer = reply_later(r.rank)](Status status) {
        answer(name_service_answer(v1, "publish_result", "name-publish-response", status));
    });
}

void PmiProtocolServer::on_unpublish(Rank& r, const Command& command)
{
    bool v1 = r.wire() == Wire::v1;
    auto name = command.find(v1 ? "service" : "name");
    if (!name) {
        refuse(r, command, "unpublish without a service name");
        return;
    }
    ops_.drop(r.rank, "pmi-name:" + std::string(*name));
    ops_.unpublish(std::string(*name), [v1, answer = reply_later(r.rank)](Status status) {
        answer(name_service_answer(v1, "unpublish_result", "name-unpublish-response", status));
    });
}

void PmiProtocolServer::on_lookup(Rank& r, const Command& command)
{
    bool v1 = r.wire() == Wire::v1;
    auto name = command.find(v1 ? "service" : "name");
    if (!name) {
        refuse(r, command, "lookup without a service name");
        return;
    }
    std::string service(*name);
    ops_.lookup(service, [v1, service, answer = reply_later(r.rank)](Status status, std::optional<std::string> port) {
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

void PmiProtocolServer::on_abort(Rank& r, const Command& command)
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
    fail(r.rank, message.empty() || message == "abort"
                     ? fmt::format("{} called PMI_Abort with exit code {}", rank_name(r.rank), code)
                     : fmt::format("{} called PMI_Abort with exit code {}: {}", rank_name(r.rank), code, message),
         code);
}

void PmiProtocolServer::on_finalize(Rank& r, const Command&)
{
    r.state = Rank::State::finalized;
    reply(r, make(r.wire() == Wire::v1 ? "finalize_ack" : "finalize-response").add("rc", "0"));
    ops_.mark(r.rank, "pmi_finalize");
    check_barrier();
}

void PmiProtocolServer::on_not_supported(Rank& r, const Command& command)
{
    // Dynamic processes over simple PMI: the caller gets an error at once, never a wait.
    bool v1 = r.wire() == Wire::v1;
    // PMI-1 sends a spawn as one mcmd block per command and waits for one answer after the last.
    if (v1 && command.find("totspawns") && command.find("spawnssofar") != command.find("totspawns"))
        return;
    auto answer = make(v1 ? command.name + "_result" : command.name + "-response");
    std::string why = fmt::format("PMI {} is not supported by canopy", command.name);
    answer.add("rc", "-1").add(v1 ? "msg" : "errmsg", why);
    if (!r.complained) {
        r.complained = true;
        pmi_log().warn("{}: asked for PMI {}, which canopy does not support", rank_name(r.rank), command.name);
    }
    reply(r, answer);
}

void PmiProtocolServer::connection_closed(long rank, const std::string& why)
{
    if (!open(rank))
        return;
    Rank& r = ranks_.at(rank);
    auto state = r.state;
    r.state = Rank::State::closed;
    for (auto it = node_attr_waiters_.begin(); it != node_attr_waiters_.end();)
        it = it->second == rank ? node_attr_waiters_.erase(it) : std::next(it);
    in_barrier_.erase(rank);   // it can no longer be told the barrier is over
    if (state != Rank::State::initialized) {
        check_barrier();   // never spoke PMI, or finalized: only a barrier waiting on it matters
        return;
    }
    rank_left_in_mpi_ = true;
    if (!why.empty())
        pmi_log().debug("{}: PMI connection error: {}", rank_name(rank), why);
    if (r.exited) {
        check_barrier();
        return;
    }
    r.broke_off = true;
    ops_.await_exit(rank);
}

void PmiProtocolServer::exit_overdue(long rank)
{
    auto it = ranks_.find(rank);
    if (it == ranks_.end() || it->second.exited)
        return;
    fail(rank, fmt::format("{} closed its PMI connection (PMI_FD) before PMI_Finalize", rank_name(rank)));
}

void PmiProtocolServer::rank_exited(long rank, int wait_status)
{
    auto it = ranks_.find(rank);
    if (it == ranks_.end())
        return;
    it->second.exited = true;
    it->second.wait_status = wait_status;
    check_barrier();
}

void PmiProtocolServer::check_barrier()
{
    if (in_barrier_.empty() || failed_ || stopped_)
        return;
    for (const auto& [rank, r] : ranks_) {
        if (in_barrier_.contains(rank))
            continue;
        if (r.exited && r.wait_status != 0)
            return;   // the daemon reports its exit, which ends the job
        if (auto why = never_joins(r)) {
            fail(rank, fmt::format("{} {}, but ranks on {} wait for it in a PMI barrier", rank_name(rank), *why,
                                   job_.node));
            return;
        }
    }
}

std::optional<std::string> PmiProtocolServer::never_joins(const Rank& r) const
{
    if (r.state == Rank::State::finalized)
        return "has called PMI_Finalize";
    if (r.exited)
        return r.broke_off ? "exited without PMI_Finalize" : "exited without joining it";
    return std::nullopt;   // still running, or broke off and within its grace: it may yet arrive or exit
}

void PmiProtocolServer::fail(long rank, std::string message, int exit_code)
{
    if (failed_ || stopped_)
        return;
    failed_ = true;
    pmi_log().debug("{}", message);
    ops_.fail(rank, exit_code, std::move(message));
}

void PmiProtocolServer::stop()
{
    if (stopped_)
        return;
    stopped_ = true;
    for (auto& [rank, r] : ranks_) {
        rank_left_in_mpi_ |= r.state == Rank::State::initialized;
        r.state = Rank::State::closed;
    }
    node_attr_waiters_.clear();
}

} // namespace canopy
