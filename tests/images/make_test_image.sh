#!/bin/sh
# make_test_image.sh OUT_DIR [KEY=VALUE ...]
#
# Builds a tiny OCI image from the static busybox, for the image cache tests
# and the end-to-end tests. Writes (replacing what was there):
#   OUT_DIR/layout               an OCI layout directory, tag "test"  (oci:OUT_DIR/layout:test)
#   OUT_DIR/busybox.tar          the same image as an OCI archive     (oci-archive:...)
#   OUT_DIR/busybox-docker.tar   the same image as `docker save` output (docker-archive:...),
#                                named gpupool/busybox:test
# The image: /bin/busybox with links for common commands, an empty /app, /tmp;
# config Env GREETING=hello-from-image and PATH=/bin, WorkingDir /app,
# Entrypoint ["/bin/sh", "-c"], Cmd ["echo image-default-cmd"]. Each extra
# KEY=VALUE argument is added to Env, which makes a different image (tests
# use it for a second image or a rebuilt one).
#
# Needs umoci, skopeo and a statically linked busybox (BUSYBOX=/path to
# choose one); no network, no root (umoci runs --rootless).
set -eu

if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [KEY=VALUE ...]" >&2
  exit 2
fi
out=$1
shift
busybox=${BUSYBOX:-$(command -v busybox || true)}
if [ -z "$busybox" ] || [ ! -x "$busybox" ]; then
  echo "$0: busybox not found (install busybox-static or set BUSYBOX)" >&2
  exit 1
fi
for tool in umoci skopeo; do
  command -v "$tool" >/dev/null || { echo "$0: $tool not found" >&2; exit 1; }
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

layout=$work/layout
bundle=$work/bundle
umoci init --layout "$layout"
umoci new --image "$layout:test"
umoci unpack --rootless --image "$layout:test" "$bundle"

rootfs=$bundle/rootfs
mkdir -p "$rootfs/bin" "$rootfs/app" "$rootfs/tmp"
chmod 0755 "$rootfs" "$rootfs/bin" "$rootfs/app"
chmod 1777 "$rootfs/tmp"
cp "$busybox" "$rootfs/bin/busybox"
chmod 0755 "$rootfs/bin/busybox"
for cmd in sh ls cat echo id env pwd sleep mkdir touch head true false ps kill wc rm stat; do
  ln -s busybox "$rootfs/bin/$cmd"
done

umoci repack --image "$layout:test" "$bundle"
# Turn each extra KEY=VALUE argument into --config.env=KEY=VALUE, in place.
n=$#
while [ "$n" -gt 0 ]; do
  set -- "$@" "--config.env=$1"
  shift
  n=$((n - 1))
done
umoci config --image "$layout:test" \
  --config.env GREETING=hello-from-image --config.env PATH=/bin "$@" \
  --config.workingdir /app \
  --config.entrypoint /bin/sh --config.entrypoint -c \
  --config.cmd "echo image-default-cmd"
umoci gc --layout "$layout"
# umoci writes index.json 0600; the layout is read by other users in e2e tests.
chmod -R a+rX "$layout"

skopeo --tmpdir "$work" copy --quiet "oci:$layout:test" "oci-archive:$work/busybox.tar"
skopeo --tmpdir "$work" copy --quiet "oci:$layout:test" "docker-archive:$work/busybox-docker.tar:gpupool/busybox:test"

rm -rf "$out/layout" "$out/busybox.tar" "$out/busybox-docker.tar"
mv "$layout" "$out/layout"
mv "$work/busybox.tar" "$out/busybox.tar"
mv "$work/busybox-docker.tar" "$out/busybox-docker.tar"
