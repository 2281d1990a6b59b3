#!/bin/sh
# A stand-in for an editor or agent plugin, for the README's examples: it
# does what plugins do on the network, through HTTP_PROXY/HTTPS_PROXY as
# most tools do, and once around them. Run it under sbx, never bare.
ask() {
	code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$@")
	printf '%-40s -> HTTP %s, curl exit %s\n' "$1" "$code" "$?"
}
ask https://registry.npmjs.org/is-number                         # its own updates
ask http://telemetry.example.com/v1/event -d '{"event":"start"}' # telemetry
ask https://collector.example.net/upload --data-binary @/etc/hostname
ask http://198.51.100.7/direct --noproxy '*'                     # around the proxy
