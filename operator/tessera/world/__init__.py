"""The cluster as the operator sees it: facts, the World over them, status rendering and
pacing. Pure: no kopf, no kubernetes, nothing of tessera.controller."""
