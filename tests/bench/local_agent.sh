#!/bin/sh
# Stand-in for ssh in launch benchmarks: skips ssh options and the host, runs the command locally.
# Like a real ssh, the remaining words are joined with spaces and run by the (local) shell, so
# MPI launchers that quote their daemon command for a remote shell behave as they would over ssh.
# If LOCAL_AGENT_TMPDIR_ROOT is set, TMPDIR is set to $LOCAL_AGENT_TMPDIR_ROOT/HOST for the command.
while [ $# -gt 0 ]; do
    case "$1" in
        --) shift; break ;;
        # ssh options that take a value
        -[bcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
        -[bcDEeFIiJLlmOoPpQRSWw]*) shift ;;
        # flag-only ssh options (-x, -T, -n, -q, -46AaCfGgKkMNnqsTtVvXxYy and bundles)
        -*) shift ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "local_agent.sh: no host given (usage: local_agent.sh [ssh options] HOST COMMAND...)" >&2; exit 255; }
host=$1
shift # the host: everything runs on this machine
[ $# -gt 0 ] || { echo "local_agent.sh: no command given after the host" >&2; exit 255; }
# Real nodes each have their own /tmp; without this, daemons of different fake hosts share
# (and race to create and remove) one session directory, e.g. Open MPI's /tmp/ompi.<host>.<uid>.
if [ -n "${LOCAL_AGENT_TMPDIR_ROOT:-}" ]; then
    TMPDIR="$LOCAL_AGENT_TMPDIR_ROOT/$host"
    mkdir -p "$TMPDIR" || exit 255
    export TMPDIR
fi
exec /bin/sh -c "$*"
