"""``python -m selfrag_core.serve --host 127.0.0.1 --port 8000 --index DIR --llm fake|local``."""

from selfrag_core.serve.server import main

main()
