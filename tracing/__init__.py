"""OpenTelemetry traces of the backend: a span per request Triton traces, and health incidents as traces.

    spans.py            the tracer (its own provider), a request's span from `execute()` to its final response,
                        an incident's trace from unhealthy to recovered, and the tracing settings read from
                        tritonserver's command line
    span_record.py      a finished span as plain data (what the stub hands the export process)
    export_process.py   the OTLP exporter in a process of its own, off the stub's GIL: finished spans go there as
                        records, in batches; those it could not deliver are counted

What a request's span says (the GenAI attributes, vLLM's trace headers) is the backend's to decide:
backend/trace_attributes.py, which knows the request types. Imports only `common`: the composition root hands it
the names it puts on spans (metrics.names spells them once, for the dashboards' trace links too).
"""
