// Command rocketmqgo runs RocketMQ's Go client (github.com/apache/rocketmq-client-go/v2)
// against a name server, one scenario per sub-command, printing a JSON object a line:
//
//	send     -namesrv A -topic T -group G -count N -modes sync,async,oneway,batch
//	push     -namesrv A -topic T -group G [-expression E]
//	failover -namesrv A -topic T -group G
//	transaction -namesrv A -topic T -group G -count N
//
// push and failover run until their stdin closes; then they shut the client down
// (a consumer storing its offsets) and exit 0.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

var (
	printing sync.Mutex
	out      = json.NewEncoder(os.Stdout)
)

// emit prints one JSON line, whole, from any goroutine.
func emit(line map[string]any) {
	printing.Lock()
	defer printing.Unlock()
	if err := out.Encode(line); err != nil {
		fmt.Fprintln(os.Stderr, "printing:", err)
		os.Exit(1)
	}
}

type options struct {
	namesrv, topic, group, modes, expression string
	count                                    int
}

func main() {
	if os.Getenv("ROCKETMQ_GO_LOG_LEVEL") == "" {
		rlog.SetLogLevel("warn") // to stderr: stdout carries the JSON lines alone
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rocketmqgo send|push|failover -namesrv A -topic T -group G")
		os.Exit(2)
	}
	flags := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var o options
	flags.StringVar(&o.namesrv, "namesrv", "", "name server host:port")
	flags.StringVar(&o.topic, "topic", "", "topic")
	flags.StringVar(&o.group, "group", "", "producer or consumer group")
	flags.StringVar(&o.modes, "modes", "sync", "send modes, comma-separated")
	flags.StringVar(&o.expression, "expression", "*", "tag expression")
	flags.IntVar(&o.count, "count", 1, "messages per send mode")
	_ = flags.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "send":
		err = send(o)
	case "push":
		err = push(o)
	case "failover":
		err = failover(o)
	case "transaction":
		err = transaction(o)
	default:
		err = fmt.Errorf("no sub-command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func newProducer(o options) (rocketmq.Producer, error) {
	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{o.namesrv}),
		producer.WithGroupName(o.group), producer.WithRetry(2),
		producer.WithSendMsgTimeout(3*time.Second))
	if err != nil {
		return nil, err
	}
	return p, p.Start()
}

func message(topic, mode string, i int) *primitive.Message {
	m := primitive.NewMessage(topic, []byte(fmt.Sprintf("%s %d", mode, i)))
	m.WithTag("Tag" + string("ABC"[i%3]))
	m.WithKeys([]string{fmt.Sprintf("key-%s-%d", mode, i)})
	m.WithProperty("scenario", mode)
	m.WithProperty("seq", strconv.Itoa(i))
	return m
}

// storeHost is where the broker that stored a message listens, as its offset id says.
func storeHost(offsetMsgID string) string {
	id, err := primitive.UnmarshalMsgID([]byte(strings.Split(offsetMsgID, ",")[0]))
	if err != nil {
		return "undecodable: " + err.Error()
	}
	return fmt.Sprintf("%s:%d", id.Addr, id.Port)
}

func result(mode string, i int, r *primitive.SendResult) map[string]any {
	status := "SEND_OK"
	if r.Status != primitive.SendOK {
		status = fmt.Sprintf("status %d", r.Status)
	}
	return map[string]any{"mode": mode, "i": i, "sendStatus": status, "msgId": r.MsgID,
		"offsetMsgId": r.OffsetMsgID, "brokerName": r.MessageQueue.BrokerName,
		"queueId": r.MessageQueue.QueueId, "queueOffset": r.QueueOffset,
		"storeHost": storeHost(r.OffsetMsgID)}
}

func send(o options) error {
	p, err := newProducer(o)
	if err != nil {
		return err
	}
	defer func() { _ = p.Shutdown() }()
	ctx := context.Background()
	for _, mode := range strings.Split(o.modes, ",") {
		switch mode {
		case "sync":
			for i := 0; i < o.count; i++ {
				r, err := p.SendSync(ctx, message(o.topic, mode, i))
				if err != nil {
					return err
				}
				emit(result(mode, i, r))
			}
		case "async":
			var answered sync.WaitGroup
			for i := 0; i < o.count; i++ {
				answered.Add(1)
				n := i
				err := p.SendAsync(ctx, func(_ context.Context, r *primitive.SendResult, err error) {
					defer answered.Done()
					if err != nil {
						emit(map[string]any{"mode": mode, "i": n, "error": err.Error()})
					} else {
						emit(result(mode, n, r))
					}
				}, message(o.topic, mode, i))
				if err != nil {
					return err
				}
			}
			answered.Wait()
		case "oneway":
			for i := 0; i < o.count; i++ {
				if err := p.SendOneWay(ctx, message(o.topic, mode, i)); err != nil {
					return err
				}
				emit(map[string]any{"mode": mode, "i": i})
			}
		case "batch":
			var batch []*primitive.Message
			for i := 0; i < o.count; i++ {
				batch = append(batch, message(o.topic, mode, i))
			}
			r, err := p.SendSync(ctx, batch...)
			if err != nil {
				return err
			}
			line := result(mode, 0, r)
			line["msgIds"] = strings.Split(r.MsgID, ",")
			line["offsetMsgIds"] = strings.Split(r.OffsetMsgID, ",")
			emit(line)
		default:
			return fmt.Errorf("no send mode %q", mode)
		}
	}
	return nil
}

// stdinClosed is closed when the test closes this process's stdin: its way of saying stop.
func stdinClosed() <-chan struct{} {
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(closed)
	}()
	return closed
}

func push(o options) error {
	c, err := rocketmq.NewPushConsumer(consumer.WithNameServer([]string{o.namesrv}),
		consumer.WithGroupName(o.group), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		return err
	}
	err = c.Subscribe(o.topic, consumer.MessageSelector{Type: consumer.TAG, Expression: o.expression},
		func(_ context.Context, messages ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range messages {
				properties := map[string]string{}
				for _, key := range []string{"scenario", "seq"} {
					if value := m.GetProperty(key); value != "" {
						properties[key] = value
					}
				}
				emit(map[string]any{"msgId": m.MsgId, "offsetMsgId": m.OffsetMsgId,
					"topic": m.Topic, "queueId": m.Queue.QueueId, "queueOffset": m.QueueOffset,
					"body": string(m.Body), "tags": m.GetTags(), "keys": m.GetKeys(),
					"properties": properties, "bornTimestamp": m.BornTimestamp,
					"storeTimestamp": m.StoreTimestamp, "bornHost": m.BornHost,
					"storeHost": m.StoreHost, "reconsumeTimes": m.ReconsumeTimes})
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	<-stdinClosed()
	if err := c.Shutdown(); err != nil {
		return err
	}
	emit(map[string]any{"stopped": true})
	return nil
}

func failover(o options) error {
	p, err := newProducer(o)
	if err != nil {
		return err
	}
	stop := stdinClosed()
	sends, failed := 0, 0
	for running := true; running; sends++ {
		r, err := p.SendSync(context.Background(), message(o.topic, "failover", sends))
		if err != nil {
			failed++
			emit(map[string]any{"mode": "failover", "i": sends, "error": err.Error()})
			time.Sleep(10 * time.Millisecond)
		} else {
			emit(result("failover", sends, r))
		}
		select {
		case <-stop:
			running = false
		default:
		}
	}
	if err := p.Shutdown(); err != nil {
		return err
	}
	emit(map[string]any{"stopped": true, "sends": sends, "failed": failed})
	return nil
}

// txListener commits message i (i % 3 == 0), rolls it back (1) or leaves it unknown
// (2); a check of an unknown one commits it.
type txListener struct{ checked chan string }

func (l *txListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	i, _ := strconv.Atoi(m.GetProperty("seq"))
	switch i % 3 {
	case 0:
		return primitive.CommitMessageState
	case 1:
		return primitive.RollbackMessageState
	}
	return primitive.UnknowState
}

func (l *txListener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	emit(map[string]any{"checked": m.GetProperty("seq"), "msgId": m.MsgId, "topic": m.Topic,
		"checkTimes": m.GetProperty("TRANSACTION_CHECK_TIMES")})
	l.checked <- m.GetProperty("seq")
	return primitive.CommitMessageState
}

// transaction sends count messages in transactions, prints each result, then waits
// until every unknown one was checked.
func transaction(o options) error {
	listener := &txListener{checked: make(chan string, 1000)}
	p, err := rocketmq.NewTransactionProducer(listener, producer.WithNameServer([]string{o.namesrv}),
		producer.WithGroupName(o.group), producer.WithRetry(2),
		producer.WithSendMsgTimeout(3*time.Second))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	states := map[primitive.LocalTransactionState]string{primitive.CommitMessageState: "COMMIT_MESSAGE",
		primitive.RollbackMessageState: "ROLLBACK_MESSAGE", primitive.UnknowState: "UNKNOW"}
	for i := 0; i < o.count; i++ {
		r, err := p.SendMessageInTransaction(context.Background(), message(o.topic, "transaction", i))
		if err != nil {
			return err
		}
		line := result("transaction", i, r.SendResult)
		line["state"] = states[r.State]
		emit(line)
	}
	unknown := map[string]bool{}
	for i := 2; i < o.count; i += 3 {
		unknown[strconv.Itoa(i)] = true
	}
	deadline := time.After(120 * time.Second)
	for len(unknown) > 0 {
		select {
		case seq := <-listener.checked:
			delete(unknown, seq)
		case <-deadline:
			return fmt.Errorf("unknown transactions never checked: %v", unknown)
		}
	}
	return p.Shutdown()
}
