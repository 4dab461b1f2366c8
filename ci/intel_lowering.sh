#!/usr/bin/env bash
# Intel lowering check: compile every Triton kernel specialisation the provider launches
# for Intel GPUs (bmg, pvc, lnl with DPAS; dg2, mtl without fp64) with Intel's Triton
# (triton-xpu 3.3.0b1) and Intel's GPU compiler (ocloc + IGC from Debian sid), no GPU needed.
# Facts behind it: docs/intel_lowering.md.
#
#   ci/intel_lowering.sh sysroot DIR   download Debian sid's intel-ocloc + libigc2 (+ the sid glibc they
#                                      need) with apt into a private state dir, unpack them into DIR,
#                                      write DIR/bin/ocloc (a wrapper running ocloc through DIR's own
#                                      loader) and DIR/OCL_DRIVER_VERSION. Used by `ci/venvs.sh intel`.
#   ci/intel_lowering.sh run [ARGS]    run the job (ci/intel_lowering.py) in .venvs/intel; ARGS go to it
#                                      (--json FILE, --md FILE, --jobs N, --targets bmg,pvc,...).
# The system's apt sources, state and cache are left alone; nothing is cached between runs.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
VENV_DIR="${VXA_VENV_DIR:-$here/.venvs}"
cmd="${1:-run}"
[ $# -gt 0 ] && shift

case "$cmd" in
  sysroot)
    dest="$1"
    mirror="${VXA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/etc/preferences.d"
    : > "$work/status"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" > "$work/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
              -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$work/etc/preferences.d"
              -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Dir::State::Status=$work/status"
              -o "APT::Architecture=amd64" -o "APT::Architectures::=amd64" -o "Acquire::Languages=none"
              -o "Debug::NoLocking=1" -o "Acquire::Retries=3")
    echo "[intel] apt update (sid, private state in $work)"
    apt-get "${apt_opts[@]}" -q update > "$work/update.log" 2>&1 || { cat "$work/update.log"; exit 1; }
    (cd "$work/debs" && apt-get "${apt_opts[@]}" -q download \
        intel-ocloc libigc2 libc6 libstdc++6 libgcc-s1 zlib1g > "$work/download.log" 2>&1) \
      || { cat "$work/download.log"; exit 1; }
    rm -rf "$dest"
    mkdir -p "$dest/bin"
    for deb in "$work"/debs/*.deb; do
      dpkg -x "$deb" "$dest"
      dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb" >> "$dest/PACKAGES"
    done
    rm -rf "$dest/usr/share/doc" "$dest/usr/share/man" "$dest/usr/share/locale" "$dest/usr/share/lintian"
    lib="$dest/usr/lib/x86_64-linux-gnu"
    real="$(ls "$dest"/usr/bin/ocloc-* 2>/dev/null | head -n1)"
    [ -x "$real" ] || { echo "[intel] no ocloc binary in the sid packages" >&2; exit 1; }
    [ -x "$lib/ld-linux-x86-64.so.2" ] || { echo "[intel] no loader in the sysroot" >&2; exit 1; }
    # a wrapper named `ocloc`, found on PATH by Intel's Triton (device queries) and by the job
    cat > "$dest/bin/ocloc" <<EOF
#!/bin/sh
root="\$(cd "\$(dirname "\$0")/.." && pwd)"
lib="\$root/usr/lib/x86_64-linux-gnu"
exec "\$lib/ld-linux-x86-64.so.2" --library-path "\$lib" "\$root/usr/bin/$(basename "$real")" "\$@"
EOF
    chmod +x "$dest/bin/ocloc"
    q="$(mktemp -d)"  # `ocloc query X` writes a file X into the current directory
    (cd "$q" && "$dest/bin/ocloc" query OCL_DRIVER_VERSION > /dev/null 2>&1 || true)
    ver="$(cat "$q/OCL_DRIVER_VERSION" 2>/dev/null | tr -d '\0\n' || true)"
    rm -rf "$q"
    [ -n "$ver" ] || { echo "[intel] ocloc does not run from the sysroot" >&2; exit 1; }
    echo "$ver" > "$dest/OCL_DRIVER_VERSION"
    echo "[intel] ocloc sysroot ready in $dest: OCL_DRIVER_VERSION $ver ($(du -sh "$dest" | cut -f1))"
    cat "$dest/PACKAGES"
    ;;
  run)
    venv="$VENV_DIR/intel"
    [ -x "$venv/bin/python" ] && [ -x "$venv/ocloc-sysroot/bin/ocloc" ] || bash "$here/ci/venvs.sh" intel
    exec "$venv/bin/python" "$here/ci/intel_lowering.py" --sysroot "$venv/ocloc-sysroot" "$@"
    ;;
  *) echo "usage: $0 sysroot DIR | run [ARGS]" >&2; exit 2 ;;
esac
