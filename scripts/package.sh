#!/usr/bin/env bash
# Builds the Debian package of this tree, gpupool_VERSION_ARCH.deb, with
# dpkg-deb (the layout debhelper would make; docs/operator-guide.md,
# "Packages"):
#   /usr/bin/gpupool -> /usr/lib/gpupool/bin/gpupool   (stripped)
#   /usr/lib/gpupool/lib/{libgpushare.so,gpupool-cuda-probe}, share/gpupool/web/
#   /lib/systemd/system/gpupool-{server,agent}.service, /etc/default/gpupool-server
#   /usr/share/man/man1/gpupool.1.gz (from the CLI's --help), bash completion
#
#   scripts/package.sh [OUT_DIR=out]    BUILD=build: the build to package
#                                       (its targets are built first if needed);
#                                       VERSION: another version than the source's;
#                                       NO_BUILD=1: do not build, package as is
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
out=${1:-out}
build=${BUILD:-build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ ! -f "$build/build.ninja" ]; then
  echo "package.sh: $build is not a build directory (scripts/build.sh makes one)" >&2
  exit 2
fi
# NO_BUILD=1: package what the build holds (the tests do, while other tests
# run its binary), without asking ninja.
if [ -z "${NO_BUILD:-}" ]; then
  ninja -C "$build" gpupool gpushare gpupool-cuda-probe gpupool_web >/dev/null
fi
for f in bin/gpupool lib/libgpushare.so lib/gpupool-cuda-probe share/gpupool/web/index.html; do
  [ -e "$build/$f" ] || { echo "package.sh: $build/$f is missing: build it first" >&2; exit 2; }
done
# VERSION overrides the package's version (the tests' upgrade).
version=${VERSION:-$(sed -n 's/.*kVersion = "\(.*\)";.*/\1/p' src/common/version.h)}
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
lib=$root/usr/lib/gpupool
install -d "$lib/bin" "$lib/lib" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/default" \
  "$root/usr/share/doc/gpupool" "$root/usr/share/man/man1" \
  "$root/usr/share/bash-completion/completions" "$root/DEBIAN"
install -m 755 "$build/bin/gpupool" "$lib/bin/gpupool"
strip --strip-unneeded "$lib/bin/gpupool"
install -m 644 "$build/lib/libgpushare.so" "$lib/lib/"
strip --strip-unneeded "$lib/lib/libgpushare.so"
install -m 755 "$build/lib/gpupool-cuda-probe" "$lib/lib/"
cp -r "$build/share" "$lib/share"
ln -s ../lib/gpupool/bin/gpupool "$root/usr/bin/gpupool"
install -m 644 packaging/gpupool-server.service packaging/gpupool-agent.service \
  "$root/lib/systemd/system/"
install -m 644 packaging/gpupool-server.default "$root/etc/default/gpupool-server"
install -m 644 README.md docs/*.md "$root/usr/share/doc/gpupool/"
cat >"$root/usr/share/doc/gpupool/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: gpupool
Files: *
Copyright: the gpupool authors
License: see the source tree
COPYRIGHT

# The man page, from the CLI's own help: the commands and each one's help.
# (Run by name, so that its usage line says "gpupool".)
mkdir -p "$stage/path"
ln -s "$lib/bin/gpupool" "$stage/path/gpupool"
bin() { PATH="$stage/path:$PATH" gpupool "$@"; }
commands=$(bin --help | awk '/^Subcommands:/ {on=1; next} /^[A-Z][a-z]*:/ {on=0} on && /^  [a-z]/ {print $1}')
{
  echo ".TH GPUPOOL 1 \"$(date -u +%Y-%m-%d)\" \"gpupool $version\" \"User Commands\""
  echo ".SH NAME"
  echo "gpupool \\- a pool that lets a campus share its GPUs"
  echo ".SH SYNOPSIS"
  echo ".B gpupool"
  echo "\\fICOMMAND\\fR [\\fIOPTIONS\\fR]"
  echo ".SH DESCRIPTION"
  echo ".nf"
  bin --help | sed 's/\\/\\\\/g; s/^\./\\\&./'
  echo ".fi"
  echo ".SH COMMANDS"
  for c in $commands; do
    echo ".SS $c"
    echo ".nf"
    bin "$c" --help 2>/dev/null | sed 's/\\/\\\\/g; s/^\./\\\&./'
    echo ".fi"
  done
  echo ".SH SEE ALSO"
  echo "/usr/share/doc/gpupool/ (user, provider and operator guides)"
} | gzip -9n >"$root/usr/share/man/man1/gpupool.1.gz"

# Bash completion: commands, then each (sub)command's own options and
# subcommands, read from its --help when completing.
cat >"$root/usr/share/bash-completion/completions/gpupool" <<'COMPLETION'
# gpupool(1) completion: words from the --help of the command typed so far.
_gpupool() {
  local cur=${COMP_WORDS[COMP_CWORD]} path=() w
  for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
    [[ $w == -* ]] && break
    path+=("$w")
  done
  local help words
  help=$(gpupool "${path[@]}" --help 2>/dev/null) || return 0
  words=$(awk '/^Subcommands:/ {s=1; next} /^[A-Z][a-z]*:/ {s=0} s && /^  [a-z]/ {print $1}
               {for (i = 1; i <= NF; i++) if ($i ~ /^--[a-z]/) {sub(/[,=].*/, "", $i); print $i}}' \
          <<<"$help")
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _gpupool gpupool
COMPLETION

# Control: the shared libraries' packages (dpkg-shlibdeps) and the tools
# jobs need.
mkdir -p "$stage/shlibs/debian"
printf 'Source: gpupool\n\nPackage: gpupool\nArchitecture: any\n' >"$stage/shlibs/debian/control"
shlibs=$(cd "$stage/shlibs" && dpkg-shlibdeps -O "$lib/bin/gpupool" "$lib/lib/gpupool-cuda-probe" \
  "$lib/lib/libgpushare.so" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: gpupool
Version: $version
Architecture: $arch
Maintainer: gpupool developers <gpupool@localhost>
Installed-Size: $size
Depends: $shlibs, adduser, bubblewrap
Recommends: passt, skopeo, umoci
Suggests: postgresql
Section: admin
Priority: optional
Homepage: https://github.com/gpupool/gpupool
Description: a pool that lets a campus share its GPUs
 gpupool lets owners lend idle GPUs without losing control of their
 machines, and researchers run batch, fractional, multi-node and
 interactive work on them as one cluster. One binary: the server
 (gpupool-server.service), the agent (gpupool-agent.service, set up by "gpupool agent join")
 and the CLI.
CONTROL
echo /etc/default/gpupool-server >"$root/DEBIAN/conffiles"
install -m 755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm \
  "$root/DEBIAN/"
deb=$out/gpupool_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
