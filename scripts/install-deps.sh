#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Installs everything OptScope needs to build, run and test, from Debian bookworm packages.
# Idempotent; needs root (or sudo). CUDA (nvcc, NCCL) is optional and not installed here.
set -euo pipefail
packages=(
    cmake ninja-build g++ pkg-config
    qt6-base-dev qt6-svg-dev libqcustomplot-dev # GUI (Qt SVG: plots saved as SVG)
    libtorch-dev nlohmann-json3-dev libssl-dev # core: tensors, JSON, SHA-256
    libcurl4-openssl-dev libxml2-dev           # core: remote storage (S3, GCS, HTTP)
    nginx-light                                # tests: HTTPS range reads
    libgtest-dev googletest                    # tests
    python3 debootstrap                        # interop tests (scripts/torch-python builds a PyTorch 2.6 chroot)
    slurmctld slurmd slurm-client munge        # job tests: a one-node Slurm cluster that srun starts jobs on
    gdb                                        # job tests: the threads' stacks of a process that hangs
    time                                       # benchmarks: peak RSS
    dpkg-dev file                              # packaging tests (cpack DEB)
    clang-14 libclang-rt-14-dev                # fuzzing (libFuzzer) and sanitizers
    clang-format-14                            # scripts/check-format.sh
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all packages present"
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
