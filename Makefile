# Two entry points for a fresh machine: `make demo` and `make test`.
# Everything else here is what they need, built once and remembered in .stamps/.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMPS := .stamps
# torch from the CUDA build runs on CPU too; torchvision must match it (ultralytics needs it).
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
PYTRITON_SPEC ?= nvidia-pytriton==0.7.0
# The Python environment the embedded Triton's Python-backend models run in.
# Triton 2.51's stub is built against numpy 1.x: with numpy 2 every tensor a
# model returns arrives empty. So the models get their own venv: numpy<2, the
# small CPU build of torch (TorchScript only), OpenCV built for numpy 1.x, and OpenVINO
# (the same version as the converters' in pyproject.toml; it runs with numpy 1.x too).
TRITON_VENV ?= .venv-triton
TRITON_ENV_SPEC ?= "numpy<2" torch==2.13.0 "opencv-python-headless<4.11" openvino==2026.4.1
TARGET ?= cpu
# How the CPU target serves the detector, stn and lprnet: torchscript (torch in the Python
# backend) or openvino (OpenVINO IR in the Python backend; CPU_PRECISION auto: the detector
# in bf16 where this CPU has bf16 natively, else fp32; or fp32, bf16, int8).
CPU_RUNTIME ?= openvino
CPU_PRECISION ?= auto
ifeq ($(TARGET),cpu)
BUILD_RUNTIME_ARGS := --runtime $(CPU_RUNTIME) --precision $(CPU_PRECISION)
# One stamp per variant, so that changing CPU_RUNTIME or CPU_PRECISION rebuilds.
MODELS_VARIANT := cpu$(if $(filter torchscript-fp32,$(CPU_RUNTIME)-$(CPU_PRECISION)),,-$(CPU_RUNTIME)-$(CPU_PRECISION))
else
BUILD_RUNTIME_ARGS :=
MODELS_VARIANT := $(TARGET)
endif
# Detector input (HxW); empty: the converter's default (converters/model_config.py
# DEFAULT_INPUT_HW, 736x1280 for 16:9 cameras).
MODEL_INPUT_SIZE ?=
MODEL_SOURCES := $(wildcard converters/*.py converters/*/*.py converters/templates/*) \
	$(wildcard model_repository/plate_recognition/1/*.py)

.PHONY: setup models test demo bench accuracy lint clean

setup: $(STAMPS)/venv $(STAMPS)/triton-env $(STAMPS)/system

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e '.[convert,dev]'
	@# The wheel is only a carrier for the tritonserver binary; its metadata pins numpy<2.
	$(BIN)/pip install --quiet --no-deps $(PYTRITON_SPEC)
	@touch $@

$(STAMPS)/triton-env: Makefile
	@mkdir -p $(STAMPS)
	test -x $(TRITON_VENV)/bin/python || $(PYTHON) -m venv $(TRITON_VENV)
	$(TRITON_VENV)/bin/pip install --quiet $(TRITON_ENV_SPEC)
	@touch $@

# Debian packages: libpython3.11 for the Triton Python-backend stub; GStreamer's
# RTSP server (tests serve the clip over real RTSP), ffmpeg (benchmarks),
# Chromium and its driver (tests drive the live view in a real browser), Mosquitto (MQTT),
# PostgreSQL (the shared history), PgBouncer (a pooling proxy the history must refuse in
# transaction mode) and nginx (a reverse proxy in front of the web view): tests start their
# own servers on loopback.
APT_PACKAGES := libpython3.11 gstreamer1.0-rtsp gir1.2-gst-rtsp-server-1.0 python3-gi \
	gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-libav ffmpeg \
	chromium chromium-driver mosquitto mosquitto-clients postgresql pgbouncer nginx-light
# prometheus only for its promtool (tests check a /metrics scrape with it): without its
# recommended node exporter, and its server is stopped and disabled where systemd runs.
PROMTOOL_PACKAGE := prometheus
$(STAMPS)/system: Makefile
	@mkdir -p $(STAMPS)
	@if ! dpkg -s $(APT_PACKAGES) $(PROMTOOL_PACKAGE) >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			$(PROMTOOL_PACKAGE) \
		&& { systemctl disable --now prometheus pgbouncer >/dev/null 2>&1 || true; }; fi
	@touch $@

# Weights are verified (sha256) or downloaded, then exported into model_repository/.
models: $(STAMPS)/models-$(MODELS_VARIANT)
$(STAMPS)/models-$(MODELS_VARIANT): $(STAMPS)/venv $(MODEL_SOURCES)
	$(BIN)/python -m converters fetch
	$(BIN)/python -m converters build --target $(TARGET) \
		$(if $(MODEL_INPUT_SIZE),--input-size $(MODEL_INPUT_SIZE)) $(BUILD_RUNTIME_ARGS)
	@rm -f $(STAMPS)/models-*
	@touch $@

test: setup models
	$(BIN)/python -m pytest

# The service on configs/demo.yaml (embedded CPU Triton), printing plate events.
# Quiet (@): stdout carries only the events, one JSON line each.
demo: setup models
	@LPR_ASSETS_DIR=$$($(BIN)/python -c 'from converters import assets; print(assets.default_assets_dir())') \
		$(BIN)/python -m streamer run --config configs/demo.yaml --once

# Side-by-side performance suite (about 45 minutes on 2 cores: P1-P4 ~17, overload ladder ~14,
# runtimes ~5, cameras per core ~3, motion gating ~2): docs/PERFORMANCE.md (+ .json, .png next to it);
# then the SIGTERM shutdown times (about 4 minutes), the event history at 1 million events
# (about 5 minutes) and the event log's throughput and isolation (about 1.5 minutes).
bench: setup models
	$(BIN)/pip install --quiet -e '.[convert,dev,bench]'
	$(BIN)/python -m bench
	$(BIN)/python -m bench.shutdown
	$(BIN)/python -m bench.store
	$(BIN)/python -m bench.event_log
	$(BIN)/python -m bench.scale_out

# Accuracy over labelled variants of the shared footage (a few minutes): docs/ACCURACY.md.
accuracy: setup models
	$(BIN)/python -m bench.accuracy

lint: $(STAMPS)/venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(STAMPS) model_repository/detector model_repository/stn model_repository/lprnet \
		model_repository/plate_recognition/config.pbtxt model_repository/build_info.json
