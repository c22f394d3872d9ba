package sluicepage

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"strings"
)

// The page's style and script, inlined into its HTML: the page loads
// nothing else.
var (
	//go:embed page.css
	pageStyle string
	//go:embed page.js
	pageScript string
)

// pageHTML is the page. It holds no data: the script fetches the data and
// writes it into the page as text (textContent), so nothing a key or a
// name holds is ever parsed as HTML.
var pageHTML = strings.Join([]string{
	`<!doctype html>`,
	`<html lang="en"><head><meta charset="utf-8">`,
	`<meta name="viewport" content="width=device-width, initial-scale=1">`,
	`<title>sluice</title><link rel="icon" href="data:,">`,
	`<style>` + pageStyle + `</style></head>`,
	`<body><header><h1>sluice</h1><span id="state" class="dot wait"></span><span id="status">loading</span></header>`,
	`<noscript><p>This page needs JavaScript. Its data is at this address with the query format=json.</p></noscript>`,
	`<main>`,
	`<section id="health"><h2>Store</h2><div class="body"></div></section>`,
	`<section id="fleet"><h2>Fleet</h2><div class="body"></div></section>`,
	`<section id="limits" class="wide"><h2>Limits</h2><div class="body"></div></section>`,
	`<section id="top" class="wide"><h2>Top talkers</h2><div class="body"></div></section>`,
	`<section id="warnings" class="wide"><h2>Warnings</h2><div class="body"></div></section>`,
	`<section id="overrides" class="wide"><h2>Overrides</h2><div class="body"></div></section>`,
	`</main>`,
	`<script>` + pageScript + `</script></body></html>`,
}, "\n")

// pageCSP lets the page run its own inline style and script (named by
// their digests) and fetch from its own origin, and nothing else.
var pageCSP = "default-src 'none'; script-src '" + digest(pageScript) + "'; style-src '" + digest(pageStyle) +
	"'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// digest is text's SHA-256 in a CSP source expression's form.
func digest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}
