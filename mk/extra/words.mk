# The project speaks of the software only: scripts/check_words.sh fails on words about how the work
# was organised in the docs, the benchmark records, the headers, the sources, the tests, the
# scripts and the build files; its self-test proves it can fail. Part of `make test`.
EXTRA_TESTS += test-words
.PHONY: test-words
test-words:
	bash scripts/check_words.sh --self-test
	bash scripts/check_words.sh
