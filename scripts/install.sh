#!/usr/bin/env bash
# Installs strata on this host from its .deb, configures it and starts it.
#
#   install.sh --deb strata_1.2.3_amd64.deb --site rack-1 --tier onprem \
#       --join 10.0.0.1:7946 --gossip-key-file ./gossip.key \
#       [--api-token-file ./api.token] [--name gpu-07] [--bind 0.0.0.0:7946] \
#       [--api 127.0.0.1:7470] [--region eu-west] [--controller true|false] \
#       [--label k=v]... [--no-start] \
#       [--ca-cert ca.crt --trusted-keys signing.pub \
#        --bootstrap http://10.0.0.1:7470 --bootstrap-token-file ./cert.token] \
#       [--ca-key ca.key --signing-key signing.key --cert-token-file ./cert.token] \
#       [--operator-token-file ./operator.token]
#
# With --ca-cert the agent runs the data plane (artifacts, forwarded
# inference); --bootstrap names an agent that holds the CA key, which issues
# this node's certificate at its first start for the token (scope cert).
# The CA holder gets --ca-key (it issues certificates, its own included),
# --signing-key (artifacts pushed through it are signed) and
# --cert-token-file (the token, of scope cert, that others bootstrap with).
# --operator-token-file gives the operator's token every scope but cert on
# this agent; give it to every agent of a mesh that spans hosts, since a
# policy write is checked by the controller it reaches. Of both tokens only
# their SHA-256 is kept (acl_tokens), not the token.
#
# It installs the package (dpkg -i; skipped without --deb when strata is
# already installed), writes /etc/strata/agent.yaml from the flags (the old
# one is kept as agent.yaml.bak), copies the secrets into root-only files in
# /etc/strata/credentials/, which the systemd unit hands to the agent, and
# starts the service. Without systemd it hands the credentials over as the
# unit would (/run/credentials/strata.service) and starts the agent in the
# background as the strata user, logging to /var/log/strata/agent.log.
# Run it as root; running it again reconfigures and restarts.
set -euo pipefail

die() { echo "install: $*" >&2; exit 1; }
log() { echo "install: $*" >&2; }

deb="" name="" site="" tier="" region="" bind="" api="" controller=""
gossip_key_file="" api_token_file="" start=1
ca_cert="" trusted_keys="" bootstrap="" bootstrap_token_file=""
ca_key="" signing_key="" cert_token_file="" operator_token_file=""
joins=() labels=()
conf_dir=${STRATA_CONF_DIR:-/etc/strata}

while [ $# -gt 0 ]; do
	case "$1" in
	--deb) deb=$2; shift 2 ;;
	--join) joins+=("$2"); shift 2 ;;
	--site) site=$2; shift 2 ;;
	--tier) tier=$2; shift 2 ;;
	--region) region=$2; shift 2 ;;
	--name) name=$2; shift 2 ;;
	--bind) bind=$2; shift 2 ;;
	--api) api=$2; shift 2 ;;
	--controller) controller=$2; shift 2 ;;
	--label) labels+=("$2"); shift 2 ;;
	--gossip-key-file) gossip_key_file=$2; shift 2 ;;
	--api-token-file) api_token_file=$2; shift 2 ;;
	--ca-cert) ca_cert=$2; shift 2 ;;
	--trusted-keys) trusted_keys=$2; shift 2 ;;
	--bootstrap) bootstrap=$2; shift 2 ;;
	--bootstrap-token-file) bootstrap_token_file=$2; shift 2 ;;
	--ca-key) ca_key=$2; shift 2 ;;
	--signing-key) signing_key=$2; shift 2 ;;
	--cert-token-file) cert_token_file=$2; shift 2 ;;
	--operator-token-file) operator_token_file=$2; shift 2 ;;
	--no-start) start=0; shift ;;
	-h | --help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done

[ "$(id -u)" -eq 0 ] || die "run as root (sudo $0 ...)"
case "$tier" in "" | edge | onprem | cloud) ;; *) die "--tier $tier: use edge, onprem or cloud" ;; esac
case "$controller" in "" | true | false) ;; *) die "--controller $controller: use true or false" ;; esac
for f in "$gossip_key_file" "$api_token_file" "$ca_cert" "$trusted_keys" "$bootstrap_token_file" "$ca_key" "$signing_key" "$cert_token_file" "$operator_token_file"; do
	[ -z "$f" ] || [ -r "$f" ] || die "cannot read $f"
done
if [ -n "$bootstrap" ]; then
	[ -n "$ca_cert" ] || die "--bootstrap needs --ca-cert (the certificate it gets is checked against it)"
	[ -n "$bootstrap_token_file" ] || die "--bootstrap needs --bootstrap-token-file (a token with scope cert there)"
fi
[ -z "$ca_key" ] || [ -n "$ca_cert" ] || die "--ca-key needs --ca-cert (the CA's certificate beside its key)"
[ -z "$cert_token_file" ] || [ -n "$ca_key" ] || die "--cert-token-file needs --ca-key: only a CA holder issues certificates"
[ -z "$bootstrap" ] || [ -z "$ca_key" ] || die "--bootstrap and --ca-key: a CA holder issues its own certificate; drop --bootstrap"
for l in "${labels[@]}"; do
	[[ "$l" == ?*=* ]] || die "--label $l: use k=v"
done

if [ -n "$deb" ]; then
	[ -f "$deb" ] || die "no such file: $deb"
	t0=$(date +%s%N)
	DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" >/dev/null || die "dpkg -i $deb failed"
	ms=$((($(date +%s%N) - t0) / 1000000))
	log "installed $(dpkg-query -W -f='${Package} ${Version} ${Architecture}' strata) in ${ms}ms"
elif ! command -v strata >/dev/null; then
	die "strata is not installed: pass --deb FILE"
fi

# systemd is running as PID 1 when /run/systemd/system exists (sd_booted).
systemd=0
[ -d /run/systemd/system ] && systemd=1

# Secrets: root-only files, handed to the agent by the unit's LoadCredential=.
install -d -m 0700 -o root -g root "$conf_dir/credentials"
cred_dir=/run/credentials/strata.service
if [ -n "$gossip_key_file" ]; then
	install -m 0600 -o root -g root "$gossip_key_file" "$conf_dir/credentials/gossip-key"
fi
if [ -n "$api_token_file" ]; then
	install -m 0600 -o root -g root "$api_token_file" "$conf_dir/credentials/api-token"
fi
if [ -n "$bootstrap_token_file" ]; then
	install -m 0600 -o root -g root "$bootstrap_token_file" "$conf_dir/credentials/bootstrap-token"
fi
[ -z "$ca_key" ] || install -m 0600 -o root -g root "$ca_key" "$conf_dir/credentials/ca-key"
[ -z "$signing_key" ] || install -m 0600 -o root -g root "$signing_key" "$conf_dir/credentials/signing-key"
# Tokens in acl_tokens are kept as their hashes.
token_sha() { strata token hash - <"$1" || die "strata token hash: cannot hash $1"; }
cert_token_sha="" operator_token_sha=""
[ -z "$cert_token_file" ] || cert_token_sha=$(token_sha "$cert_token_file")
[ -z "$operator_token_file" ] || operator_token_sha=$(token_sha "$operator_token_file")
# Public: the mesh CA's certificate and the artifact signers' keys.
[ -z "$ca_cert" ] || install -m 0644 -o root -g root "$ca_cert" "$conf_dir/ca.crt"
[ -z "$trusted_keys" ] || install -m 0644 -o root -g root "$trusted_keys" "$conf_dir/signing.pub"

yaml_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

conf=$conf_dir/agent.yaml
tmp=$(mktemp "$conf_dir/.agent.yaml.XXXXXX")
{
	echo "# Written by install.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ); every setting:"
	echo "# /usr/share/doc/strata/agent.yaml.example"
	[ -n "$name" ] && echo "name: $(yaml_str "$name")"
	echo "data_dir: /var/lib/strata"
	[ -n "$tier" ] && echo "tier: $tier"
	[ -n "$site" ] && echo "site: $(yaml_str "$site")"
	[ -n "$region" ] && echo "region: $(yaml_str "$region")"
	if [ ${#labels[@]} -gt 0 ]; then
		echo "labels:"
		for l in "${labels[@]}"; do echo "  $(yaml_str "${l%%=*}"): $(yaml_str "${l#*=}")"; done
	fi
	echo "bind: $(yaml_str "${bind:-0.0.0.0:7946}")"
	echo "api: $(yaml_str "${api:-127.0.0.1:7470}")"
	if [ ${#joins[@]} -gt 0 ]; then
		echo "join:"
		for j in "${joins[@]}"; do echo "  - $(yaml_str "$j")"; done
	else
		echo "join: []"
	fi
	[ -n "$controller" ] && echo "controller: $controller"
	[ -f "$conf_dir/credentials/gossip-key" ] && echo "gossip_key_file: $cred_dir/strata_gossip-key"
	[ -f "$conf_dir/credentials/api-token" ] && echo "api_token_file: $cred_dir/strata_api-token"
	[ -n "$ca_cert" ] && echo "ca_cert: $conf_dir/ca.crt"
	[ -n "$trusted_keys" ] && echo "trusted_keys: $conf_dir/signing.pub"
	[ -n "$ca_key" ] && echo "ca_key: $cred_dir/strata_ca-key"
	[ -n "$signing_key" ] && echo "signing_key: $cred_dir/strata_signing-key"
	if [ -n "$bootstrap" ]; then
		echo "bootstrap: $(yaml_str "$bootstrap")"
		echo "bootstrap_token_file: $cred_dir/strata_bootstrap-token"
	fi
	[ -n "$cert_token_sha$operator_token_sha" ] && echo "acl_tokens:"
	if [ -n "$operator_token_sha" ]; then
		echo "  - name: operator"
		echo "    sha256: $operator_token_sha"
		echo "    scopes: [read, infer, write, exec]"
	fi
	if [ -n "$cert_token_sha" ]; then
		echo "  - name: bootstrap"
		echo "    sha256: $cert_token_sha"
		echo "    scopes: [cert]"
	fi
	echo "ort_library: /usr/lib/strata/libonnxruntime.so.1"
	echo "log_level: info"
} >"$tmp"
chmod 0644 "$tmp"
[ -f "$conf" ] && cp -p "$conf" "$conf.bak"
mv -f "$tmp" "$conf"
log "wrote $conf"

if [ $systemd -eq 1 ]; then
	if [ $start -eq 0 ]; then
		log "not started (--no-start)"
		exit 0
	fi
	systemctl daemon-reload
	systemctl enable strata.service >/dev/null 2>&1
	systemctl restart strata.service
	sleep 2
	if ! systemctl is-active --quiet strata.service; then
		journalctl -u strata.service -n 20 --no-pager >&2 || true
		die "strata.service did not stay up (journalctl -u strata)"
	fi
	log "strata.service is running; logs: journalctl -u strata -f"
	exit 0
fi

# No systemd: hand the credentials over as the unit's LoadCredential= does
# (a directory only the strata user reads, on the memory-backed /run), stop
# the agent this script started before, if any, and start it in the
# background as the strata user.
install -d -o strata -g strata -m 0750 /var/lib/strata
install -d -o strata -g strata -m 0750 /var/log/strata
rm -rf "$cred_dir"
install -d -o strata -g strata -m 0500 "$cred_dir"
for f in "$conf_dir"/credentials/*; do
	[ -f "$f" ] || continue
	install -m 0400 -o strata -g strata "$f" "$cred_dir/strata_$(basename "$f")"
done
run=(setpriv --reuid strata --regid strata --init-groups /usr/bin/strata agent -config "$conf")
if [ $start -eq 0 ]; then
	log "not started (--no-start); to run the agent in the foreground (a container's entry point):"
	echo "  cd /var/lib/strata && exec ${run[*]}"
	exit 0
fi
pidfile=/run/strata.pid
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
	old=$(cat "$pidfile")
	kill -TERM "$old"
	# The agent leaves the mesh on SIGTERM; give it the unit's stop time.
	for _ in $(seq 1 90); do kill -0 "$old" 2>/dev/null || break; sleep 1; done
	kill -0 "$old" 2>/dev/null && die "the agent (pid $old) did not stop within 90s"
fi
logfile=/var/log/strata/agent.log
(cd /var/lib/strata && exec setsid "${run[@]}" </dev/null >>"$logfile" 2>&1) &
echo $! >"$pidfile"
sleep 2
if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
	tail -n 20 "$logfile" >&2 || true
	die "the agent did not stay up (see $logfile)"
fi
log "no systemd here: the agent runs in the background as the strata user (pid $(cat "$pidfile")); logs: $logfile; stop: kill \$(cat $pidfile)"
