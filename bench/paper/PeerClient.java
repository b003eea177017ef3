// Producer and consumer for the paper's peers, in Java: the fastest clients Debian ships
// for them (RabbitMQ's amqp-client over AMQP 0-9-1, ActiveMQ's OpenWire JMS client).
// Compiled by bench/paper/systems.py with javac at run time against the Debian jars.
//
// Usage: PeerClient SYSTEM ROLE HOST PORT QUEUE N SIZE BATCH MAX_SECONDS
//   SYSTEM  rabbitmq | activemq
//   ROLE    produce | consume | drop
//   BATCH   1 | 50 | default (see produce* below for what each means per system)
// Output (stdout, one line each): "start" when the clock starts, "progress <count>"
// every 100 ms, then "result {json}" with count, seconds and the settings used.
import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.MessageProperties;
import java.io.IOException;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import javax.jms.BytesMessage;
import javax.jms.DeliveryMode;
import javax.jms.Message;
import javax.jms.MessageConsumer;
import javax.jms.MessageProducer;
import javax.jms.Session;
import org.apache.activemq.ActiveMQConnection;
import org.apache.activemq.ActiveMQConnectionFactory;
import org.apache.activemq.command.ActiveMQQueue;

public final class PeerClient {
    // Consumer window: the paper's consumers pulled about 1000 messages per request.
    static final int PREFETCH = 1000;
    // Acknowledge every half window, so the broker never waits for an ack to send more.
    static final int ACK_EVERY = PREFETCH / 2;

    static final AtomicLong count = new AtomicLong();
    static volatile boolean reporting = true;
    static String note = "";

    public static void main(String[] args) throws Exception {
        String system = args[0], role = args[1], host = args[2], queue = args[4];
        int port = Integer.parseInt(args[3]);
        long n = Long.parseLong(args[5]);
        int size = Integer.parseInt(args[6]);
        String batch = args[7];
        double maxSeconds = Double.parseDouble(args[8]);
        byte[] payload = new byte[size];
        new Random(size).nextBytes(payload);

        Thread reporter = new Thread(() -> {
            while (reporting) {
                System.out.println("progress " + count.get());
                System.out.flush();
                try { Thread.sleep(100); } catch (InterruptedException e) { return; }
            }
        });
        reporter.setDaemon(true);
        long deadline = System.nanoTime() + (long) (maxSeconds * 1e9);
        long start = System.nanoTime();
        if (!role.equals("drop")) reporter.start();
        if (system.equals("rabbitmq")) {
            ConnectionFactory factory = new ConnectionFactory();
            factory.setHost(host);
            factory.setPort(port);
            try (Connection conn = factory.newConnection()) {
                Channel ch = conn.createChannel();
                if (role.equals("drop")) { ch.queueDelete(queue); return; }
                ch.queueDeclare(queue, true, false, false, null);  // durable
                start = begin();
                if (role.equals("produce")) rabbitProduce(ch, queue, n, payload, batch, deadline);
                else rabbitConsume(ch, queue, n, deadline);
            }
        } else {
            ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(
                "tcp://" + host + ":" + port + "?jms.prefetchPolicy.queuePrefetch=" + PREFETCH);
            ActiveMQConnection conn = (ActiveMQConnection) factory.createConnection();
            conn.start();
            try {
                ActiveMQQueue dest = new ActiveMQQueue(queue);
                if (role.equals("drop")) { conn.destroyDestination(dest); return; }
                start = begin();
                if (role.equals("produce")) activemqProduce(conn, dest, n, payload, batch, deadline);
                else activemqConsume(conn, dest, n, deadline);
            } finally {
                conn.close();
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        reporting = false;
        System.out.println("progress " + count.get());
        System.out.println("result {\"count\": " + count.get() + ", \"seconds\": " + seconds
            + ", \"note\": \"" + note + "\"}");
        System.out.flush();
    }

    // The clock starts after connecting and declaring: tell the harness (it reads the
    // broker's CPU time at this line).
    static long begin() {
        System.out.println("start");
        System.out.flush();
        return System.nanoTime();
    }

    // RabbitMQ producer. Persistent messages (delivery mode 2) on a durable queue.
    //   1 / default: one basicPublish per message, no publisher confirms (the client's
    //     default; the broker writes to disk on its own schedule: asynchronous flushing).
    //   50: publisher confirms, waiting for the confirms of every 50 messages (AMQP 0-9-1
    //     has no multi-message publish; this is its one way to group messages).
    // Done when the queue reports all messages enqueued (a passive declare round trip).
    static void rabbitProduce(Channel ch, String queue, long n, byte[] payload, String batch,
                              long deadline) throws Exception {
        AMQP.BasicProperties props = MessageProperties.PERSISTENT_BASIC;
        boolean grouped = batch.equals("50");
        if (grouped) ch.confirmSelect();
        note = grouped ? "confirms per 50" : "no confirms";
        long sent = 0;
        while (sent < n && System.nanoTime() < deadline) {
            ch.basicPublish("", queue, props, payload);
            sent++;
            if (grouped && sent % 50 == 0) ch.waitForConfirmsOrDie(60_000);
            if ((sent & 255) == 0) count.set(sent);
        }
        if (grouped) ch.waitForConfirmsOrDie(60_000);
        long until = System.nanoTime() + 120_000_000_000L;
        while (ch.queueDeclarePassive(queue).getMessageCount() < sent && System.nanoTime() < until) {
            Thread.sleep(5);
        }
        count.set(sent);
    }

    static void rabbitConsume(Channel ch, String queue, long n, long deadline) throws Exception {
        ch.basicQos(PREFETCH);
        CountDownLatch done = new CountDownLatch(1);
        note = "prefetch " + PREFETCH + ", ack every " + ACK_EVERY;
        ch.basicConsume(queue, false, new DefaultConsumer(ch) {
            long received = 0;
            @Override
            public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties p, byte[] body)
                    throws IOException {
                received++;
                if (received % ACK_EVERY == 0 || received == n) {
                    getChannel().basicAck(env.getDeliveryTag(), true);
                }
                count.set(received);
                if (received == n) done.countDown();
            }
        });
        long waitNanos = Math.max(0, deadline - System.nanoTime());
        done.await(waitNanos + 5_000_000_000L, TimeUnit.NANOSECONDS);
    }

    // ActiveMQ producer. Persistent messages to a queue stored in KahaDB.
    //   1: asynchronous sends (useAsyncSend), one message each: no broker round trip.
    //   50: a transacted session committed every 50 messages (JMS's way to group sends).
    //   default: the JMS default for persistent messages: a synchronous send each.
    // Async sends end with one synchronous send, which the broker answers only after
    // everything sent before it on the connection.
    static void activemqProduce(ActiveMQConnection conn, ActiveMQQueue dest, long n, byte[] payload,
                                String batch, long deadline) throws Exception {
        boolean transacted = batch.equals("50");
        boolean async = batch.equals("1");
        conn.setUseAsyncSend(async);
        note = transacted ? "transaction per 50" : async ? "async send" : "sync send";
        Session session = conn.createSession(transacted,
            transacted ? Session.SESSION_TRANSACTED : Session.AUTO_ACKNOWLEDGE);
        MessageProducer producer = session.createProducer(dest);
        producer.setDeliveryMode(DeliveryMode.PERSISTENT);
        long sent = 0;
        while (sent < n && System.nanoTime() < deadline) {
            BytesMessage m = session.createBytesMessage();
            m.writeBytes(payload);
            if (async && (sent == n - 1)) conn.setUseAsyncSend(false);
            producer.send(m);
            sent++;
            if (transacted && sent % 50 == 0) session.commit();
            if ((sent & 255) == 0) count.set(sent);
        }
        if (transacted) session.commit();
        if (async && sent < n) {  // stopped by the deadline: one synchronous send to drain
            conn.setUseAsyncSend(false);
            BytesMessage m = session.createBytesMessage();
            m.writeBytes(payload);
            producer.send(m);
            sent++;
        }
        count.set(sent);
        session.close();
    }

    static void activemqConsume(ActiveMQConnection conn, ActiveMQQueue dest, long n, long deadline)
            throws Exception {
        // DUPS_OK: acknowledgements go in batches (the lightest mode that still acks).
        Session session = conn.createSession(false, Session.DUPS_OK_ACKNOWLEDGE);
        MessageConsumer consumer = session.createConsumer(dest);
        note = "prefetch " + PREFETCH + ", dups-ok acks";
        long received = 0;
        long lastMessage = System.nanoTime();
        while (received < n) {
            Message m = consumer.receive(1000);
            if (m == null) {
                long now = System.nanoTime();
                if (now > deadline || now - lastMessage > 10_000_000_000L) break;
                continue;
            }
            lastMessage = System.nanoTime();
            received++;
            if ((received & 255) == 0) count.set(received);
        }
        count.set(received);
        session.close();
    }
}
