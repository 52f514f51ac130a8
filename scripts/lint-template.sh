#!/bin/sh
# lint-template.sh: cfn-lint template.yaml as each documented variant deploys it (docs/deployment.md,
# Checking the template). cfn-lint reads a parameter's default as its value, so each variant is the
# template with those defaults changed. Any error or warning fails.
set -eu
cd "$(dirname "$0")/.."
command -v cfn-lint >/dev/null || { echo "cfn-lint is not installed (pip install cfn-lint)"; exit 1; }
mkdir -p .cache/lint

# variant NAME [PARAMETER=VALUE ...]
variant() {
	name=$1
	shift
	out=.cache/lint/template-$name.yaml
	cp template.yaml "$out"
	for kv in "$@"; do
		p=${kv%%=*}
		v=${kv#*=}
		awk -v p="$p" -v v="$v" '
			$0 == "  " p ":" { in_p = 1 }
			in_p && /^    Default:/ { print "    Default: " v; in_p = 0; done = 1; next }
			/^  [A-Za-z]/ && $0 != "  " p ":" { in_p = 0 }
			{ print }
			END { if (!done) exit 1 }' "$out" > "$out.tmp" || { echo "variant $name: no default for $p"; exit 1; }
		mv "$out.tmp" "$out"
	done
	echo "== cfn-lint: $name $*"
	cfn-lint "$out"
}

variant s3
variant s3-unreserved-traced-topic ReserveConcurrency='"No"' Tracing=Active KeepLogGroups='"No"' \
	AlarmTopicArn=arn:aws:sns:eu-west-1:123456789012:amiss-alarms
variant efs LedgerBackend=EFS
variant efs-nat LedgerBackend=EFS EfsNatGateway='"Yes"'
variant efs-bursting LedgerBackend=EFS EfsThroughputMode=bursting
variant efs-own-network LedgerBackend=EFS EfsSubnetA=subnet-0123456789abcdef0 EfsSubnetB=subnet-0fedcba9876543210 \
	EfsSecurityGroup=sg-0123456789abcdef0
