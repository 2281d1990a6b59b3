#!/bin/sh
# A stand-in for version 1 of an editor extension, for the sbx audit review
# in the README: it checks its API for a licence and fetches its assets.
# (sbx's tests run it in a sandbox whose DNS answers these names with a
# test server; cmd/sbx.TestPrivilegedAuditReview.)
wget -q -O- http://api.ext.test:8080/v1/check
wget -q -O- http://cdn.ext.test:8080/assets/app.js
