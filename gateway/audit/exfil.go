package audit

import "strings"

// exfilHosts are services that take data from anyone and keep it where
// someone else can fetch it, or pass it on: a sandboxed plugin that reaches
// one can carry data out even when every request it makes is "allowed".
// A key matches the host itself and every subdomain of it.
var exfilHosts = map[string]string{
	// Paste sites and gists.
	"gist.github.com":            "gists (paste site)",
	"gist.githubusercontent.com": "gists (paste site)",
	"api.github.com":             "GitHub's API, which creates gists and issues",
	"pastebin.com":               "paste site",
	"paste.ee":                   "paste site",
	"hastebin.com":               "paste site",
	"dpaste.org":                 "paste site",
	"dpaste.com":                 "paste site",
	"paste.rs":                   "paste site",
	"ghostbin.co":                "paste site",
	"rentry.co":                  "paste site",
	"termbin.com":                "paste site",
	"ix.io":                      "paste site",
	"sprunge.us":                 "paste site",
	"controlc.com":               "paste site",
	"justpaste.it":               "paste site",
	// File drops.
	"transfer.sh":            "file upload",
	"file.io":                "file upload",
	"0x0.st":                 "file upload",
	"bashupload.com":         "file upload",
	"catbox.moe":             "file upload",
	"tmpfiles.org":           "file upload",
	"gofile.io":              "file upload",
	"wetransfer.com":         "file upload",
	"anonfiles.com":          "file upload",
	"filebin.net":            "file upload",
	"temp.sh":                "file upload",
	"oshi.at":                "file upload",
	"pixeldrain.com":         "file upload",
	"put.io":                 "file upload",
	"uguu.se":                "file upload",
	"litterbox.moe":          "file upload",
	"send.vis.ee":            "file upload",
	"ufile.io":               "file upload",
	"mega.nz":                "file upload",
	"mediafire.com":          "file upload",
	"dropboxapi.com":         "object store (Dropbox)",
	"content.dropboxapi.com": "object store (Dropbox)",
	// Object stores.
	"s3.amazonaws.com":               "object store (S3)",
	"amazonaws.com":                  "cloud APIs and object stores (S3)",
	"storage.googleapis.com":         "object store (Google Cloud Storage)",
	"blob.core.windows.net":          "object store (Azure Blob)",
	"r2.cloudflarestorage.com":       "object store (Cloudflare R2)",
	"digitaloceanspaces.com":         "object store (DigitalOcean Spaces)",
	"backblazeb2.com":                "object store (Backblaze B2)",
	"wasabisys.com":                  "object store (Wasabi)",
	"firebaseio.com":                 "database anyone with a key can write (Firebase)",
	"firebasestorage.googleapis.com": "object store (Firebase)",
	// Webhooks, request bins, tunnels and out-of-band callbacks.
	"hooks.slack.com":      "webhook (Slack)",
	"discord.com":          "webhooks (Discord)",
	"discordapp.com":       "webhooks (Discord)",
	"api.telegram.org":     "bot API (Telegram)",
	"webhook.site":         "request bin",
	"pipedream.net":        "request bin",
	"requestbin.com":       "request bin",
	"requestcatcher.com":   "request bin",
	"beeceptor.com":        "request bin",
	"hookbin.com":          "request bin",
	"postb.in":             "request bin",
	"hooks.zapier.com":     "webhook (Zapier)",
	"maker.ifttt.com":      "webhook (IFTTT)",
	"ngrok.io":             "tunnel to anyone's machine (ngrok)",
	"ngrok-free.app":       "tunnel to anyone's machine (ngrok)",
	"ngrok.app":            "tunnel to anyone's machine (ngrok)",
	"trycloudflare.com":    "tunnel to anyone's machine (Cloudflare)",
	"loca.lt":              "tunnel to anyone's machine (localtunnel)",
	"serveo.net":           "tunnel to anyone's machine (serveo)",
	"interact.sh":          "out-of-band callback (interactsh)",
	"oast.fun":             "out-of-band callback (interactsh)",
	"oast.pro":             "out-of-band callback (interactsh)",
	"oast.live":            "out-of-band callback (interactsh)",
	"oast.site":            "out-of-band callback (interactsh)",
	"oast.online":          "out-of-band callback (interactsh)",
	"oast.me":              "out-of-band callback (interactsh)",
	"burpcollaborator.net": "out-of-band callback (Burp)",
	"oastify.com":          "out-of-band callback (Burp)",
	"canarytokens.com":     "out-of-band callback (canary tokens)",
	"dnslog.cn":            "out-of-band callback (DNS log)",
	"requestrepo.com":      "out-of-band callback",
	// Link shorteners: a request to one can carry data in its path, and
	// its target is not the host the policy names.
	"bit.ly":      "link shortener",
	"tinyurl.com": "link shortener",
	"t.co":        "link shortener",
	"goo.gl":      "link shortener",
	"is.gd":       "link shortener",
	"v.gd":        "link shortener",
	"rb.gy":       "link shortener",
	"cutt.ly":     "link shortener",
	"ow.ly":       "link shortener",
	"buff.ly":     "link shortener",
	"shorturl.at": "link shortener",
	"tiny.cc":     "link shortener",
	"rebrand.ly":  "link shortener",
	"t.ly":        "link shortener",
	"s.id":        "link shortener",
}

// exfilClass says why host can carry data out, or "" when it is not
// known to. host is normalized; for a wildcard rule ("*.domain") the
// domain is checked, and a wildcard under a listed domain is marked too.
func exfilClass(host string) string {
	h := strings.TrimPrefix(host, "*.")
	for {
		if why, ok := exfilHosts[h]; ok {
			return why
		}
		dot := strings.IndexByte(h, '.')
		if dot < 0 {
			return ""
		}
		h = h[dot+1:]
	}
}
