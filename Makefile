# keyway: `make run` serves the embedded default; `make test` installs what is
# missing, builds and runs every test; `make bench` compares keyway with its peers.

GO       ?= go
BIN      := bin/keyway
# Debian packages the tests and benchmarks drive (real peers and clients).
PACKAGES := mariadb-server memcached libmemcached-tools sysbench php-cli php-mysql php-memcached haproxy chromium systemd
# A command from each package, to see what is missing without asking apt.
COMMANDS := mariadbd memcached memccapable memcaslap sysbench php haproxy chromium systemd-analyze

.PHONY: all build run test bench report-png deps vet clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/keyway

# The embedded default: a persistent memcached on 127.0.0.1:11211 keeping its
# data in ./data, written behind within a second. ARGS are passed to serve and
# override it: make run ARGS='-p 11311', make run ARGS='--config keyway.toml'.
ARGS ?=
run: build
	./$(BIN) serve --data-dir ./data --durability async $(ARGS)

deps:
	@./scripts/install-deps.sh $(PACKAGES) -- $(COMMANDS)

vet:
	$(GO) vet ./...

# Packages with shared state run again under the race detector.
RACE_PKGS := ./internal/store/ ./internal/memcache/ ./internal/engine/ ./internal/container/ \
             ./internal/writebehind/ ./internal/sqlproxy/ ./internal/validity/ ./internal/backend/ \
             ./internal/binlog/ ./internal/qcache/ ./internal/sockio/
# Every fuzzer, package:name:executions, each sized to about 20 s here, so a crash found once cannot come back
# unnoticed. A count, not a duration: Go 1.26's fuzz coordinator can fail a duration-bounded run with a spurious
# "context deadline exceeded" at the deadline under CPU contention (golang/go#75804, fixed in Go 1.27).
FUZZERS  := internal/memcache:FuzzText:60000 internal/memcache:FuzzBinary:120000 internal/memcache:FuzzMeta:80000 \
            internal/sqlproxy:FuzzPlan:45000 internal/mysqlwire:FuzzPacketReader:150000 \
            internal/mysqlwire:FuzzOKPacket:300000

test: deps build vet
	$(GO) test -count=1 -timeout 15m ./...
	$(GO) test -race -count=1 -timeout 15m $(RACE_PKGS)
	@for f in $(FUZZERS); do \
		pkg=$${f%%:*}; rest=$${f#*:}; name=$${rest%%:*}; n=$${rest##*:}; echo "fuzz $$pkg $$name $${n}x"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $${n}x -timeout 5m ./$$pkg || exit 1; \
	done

# Every suite (memcache, sql, kv, staleness) side by side with its peers, then the report: bench-report/index.html
# (one self-contained page: machine, charts, who wins, commands) and bench-report/report.json, which
# `keyway bench compare OLD.json NEW.json` reads. BENCH_ARGS passes flags: BENCH_ARGS='--duration 2s --reps 1'.
BENCH_ARGS ?=
bench: deps build
	./$(BIN) bench report --out bench-report $(BENCH_ARGS)

# docs/report.png, the README's picture of a report: the last `make bench`'s page, drawn by headless Chromium.
report-png:
	chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1880 \
		--screenshot=$(CURDIR)/docs/report.png file://$(CURDIR)/bench-report/index.html

clean:
	rm -rf bin
