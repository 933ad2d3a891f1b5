# Shared by scripts/test.sh and scripts/demo.sh: virtual environments and services.

# make_venv DIR PYTHON EXTRAS [pip requirement...]: create DIR with PYTHON, install the
# project with its EXTRAS (e.g. "dev,bench") into it. An install is skipped when DIR already
# holds one from the same pyproject.toml, extras and requirements (the project itself is
# installed editable: its code needs no reinstall).
make_venv() {
    local dir=$1 python=$2 extras=$3
    shift 3
    local stamp
    stamp="[$extras] $* $(sha256sum pyproject.toml | cut -d' ' -f1)"
    if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.ratequeue-installed" 2>/dev/null)" = "$stamp" ]; then
        echo "==> $dir is up to date with pyproject.toml"
        return 0
    fi
    if [ ! -x "$dir/bin/python" ]; then
        echo "==> creating $dir with $("$python" --version 2>&1)"
        "$python" -m venv "$dir"
        "$dir/bin/python" -m pip install --quiet --upgrade pip
    fi
    echo "==> installing django-ratequeue[$extras] into $dir $*"
    rm -f "$dir/.ratequeue-installed"
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extras]" "$@"
    echo "$stamp" >"$dir/.ratequeue-installed"
}

# find_python VERSION: print the path of a working interpreter for VERSION (e.g. 3.13), or nothing.
# pyenv's shims answer `command -v` even when they cannot run, so every candidate is tried.
find_python() {
    local version=$1 candidate
    local candidates=("python$version")
    if command -v pyenv >/dev/null 2>&1; then
        local v
        for v in $(pyenv versions --bare 2>/dev/null | grep -E "^$version(\.[0-9]+)?$" | sort -V -r); do
            candidates+=("$(pyenv root)/versions/$v/bin/python$version")
        done
    fi
    for candidate in "${candidates[@]}"; do
        if "$candidate" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$version'.split('.')))" \
            >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
}

# ensure_postgres: start the local PostgreSQL cluster if nothing answers on 127.0.0.1:5432.
ensure_postgres() {
    if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
        return 0
    fi
    echo "==> starting PostgreSQL"
    if command -v pg_ctlcluster >/dev/null 2>&1; then
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n1)" main start
    fi
    for _ in $(seq 1 30); do
        pg_isready -q -h 127.0.0.1 -p 5432 && return 0
        sleep 1
    done
    echo "PostgreSQL is not answering on 127.0.0.1:5432" >&2
    return 1
}

# ensure_chromium: make Debian's headless Chromium and its driver (the browser tests,
# marked "browser") available: install them when missing, if this runs as root with apt-get.
# Returns non-zero when they are still missing; the browser tests then skip themselves.
ensure_chromium() {
    if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
        return 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "==> installing chromium and chromium-driver for the browser tests"
        local log
        log=$(mktemp)
        if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            chromium chromium-driver; } >"$log" 2>&1; then
            tail -n 5 "$log" >&2
        fi
        rm -f "$log"
    fi
    [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]
}
