#!/usr/bin/env bash
# Packs what scripts/device/gpu-check.sh needs into .device/ (git ignores it): this machine's Node
# (xz), and app.tar.xz with dist/ and the production node_modules (better-sqlite3's addon copied from
# the development install, since the device machine has no compiler toolchain to rebuild it).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D="$ROOT/.device"; T=$(mktemp -d)
mkdir -p "$D"
cp "$ROOT/package.json" "$ROOT/package-lock.json" "$T/"
(cd "$T" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund > /dev/null)
rm -rf "$T/node_modules/better-sqlite3/deps" "$T/node_modules/better-sqlite3/src"
mkdir -p "$T/node_modules/better-sqlite3/build/Release"
cp "$ROOT/node_modules/better-sqlite3/build/Release/better_sqlite3.node" "$T/node_modules/better-sqlite3/build/Release/"
cp -r "$ROOT/dist" "$T/dist"
tar cJf "$D/app.tar.xz" -C "$T" dist node_modules package.json
xz -c "$(command -v node)" > "$D/node.xz"
cp "$ROOT/scripts/device/gpu-check.sh" "$D/"
rm -rf "$T"
ls -la "$D"
