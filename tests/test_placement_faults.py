"""A pserver that stops responding mid-run (SIGSTOP): the trainers fail with
``al.TimeoutError`` naming it within AL_TIMEOUT + a few seconds, instead of hanging (issue
27).  Uses test_faults.py's harness: a real 3-rank job with a hard time limit."""
from test_faults import SLACK_S, TIMEOUT_S, expect, run_case


def test_a_frozen_pserver_times_the_trainers_out_naming_it(tmp_path):
    code, reports, out, _ = run_case(3, '''
        import aluminum.executor as ex
        from aluminum.executor import layers
        comm = al.MPICommunicator()
        cluster = ex.Cluster.from_spec("trainer:2,pserver:1", comm)
        main, startup = ex.Program(), ex.Program()
        with ex.program_guard(main, startup):
            x = layers.data("x", [4], "float64")
            loss = layers.mean(layers.fc(x, 1, name="fc"))
            ex.SGD(0.1).minimize(loss)
        ex.place(main, ex.ParameterServerStrategy(), cluster)
        scope = ex.Scope()
        ex.Executor().run(startup, scope=scope)
        runner = ex.ParallelExecutor(main, loss_name=loss.name, scope=scope, comm=comm)
        feed = {"x": np.ones((2, 4))} if comm.rank < 2 else {}
        runner.run([loss], feed)
        fault()
        if comm.rank == 2:
            os.kill(os.getpid(), signal.SIGSTOP)
        attempt(comm.rank, "step", lambda: runner.run([loss], feed))
    ''', env={"AL_FINALIZE_TIMEOUT": "1"}, tmp_path=tmp_path)
    expect(reports, out, [0, 1], "step", "TimeoutError", within=TIMEOUT_S + SLACK_S,
           match=r"pserver rank 2 \(127\.0\.0\.1:7166\) did not respond")
    assert code != 0, out
